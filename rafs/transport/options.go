package transport

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"damselfly/rafs/registry"
)

// Options configure how references are reached. The zero value is ready to
// use.
type Options struct {
	// Insecure talks plain HTTP to the registry. It is implied when the
	// registry host is in 127.0.0.0/8, is ::1 or is localhost, on any port.
	Insecure bool
	// Platform selects the image from a multi-platform index. Nil means
	// runtime.GOOS/runtime.GOARCH (linux/amd64 on the usual build host).
	Platform *v1.Platform
	// Keychain supplies registry credentials. Nil means
	// authn.DefaultKeychain: the docker config file, honouring DOCKER_CONFIG.
	Keychain authn.Keychain
	// Transport carries registry HTTP requests; set it for tests or
	// timeouts. Nil means the project's guarded registry transport
	// (rafs/registry.NewTransport), shaped as remote.DefaultTransport.
	Transport http.RoundTripper
	// UserAgent is sent with registry requests when non-empty.
	UserAgent string
	// Mirror is the node's peer (http(s)://HOST:PORT, or unix:///path of
	// its socket): reads of manifests and blobs go through it first,
	// naming the registry with ?ns=, and directly to the registry when
	// the peer cannot be reached. Empty: directly. A malformed Mirror
	// fails the request that would use it.
	Mirror string
	// MirrorOnly keeps reads on the Mirror: when it cannot be reached
	// they fail instead of going to the registry.
	MirrorOnly bool
}

// platform returns the platform to resolve indexes to.
func (o Options) platform() v1.Platform {
	if o.Platform != nil {
		return *o.Platform
	}
	return v1.Platform{OS: runtime.GOOS, Architecture: runtime.GOARCH}
}

func (o Options) keychain() authn.Keychain {
	if o.Keychain != nil {
		return o.Keychain
	}
	return authn.DefaultKeychain
}

func (o Options) roundTripper() http.RoundTripper {
	rt := http.RoundTripper(defaultTransport)
	if o.Transport != nil {
		rt = o.Transport
	}
	if o.Mirror == "" {
		return rt
	}
	m, err := newMirrorTransport(o.Mirror, rt)
	if err != nil {
		return failingTransport{err}
	}
	m.only = o.MirrorOnly
	return m
}

// failingTransport fails every request with err.
type failingTransport struct{ err error }

func (f failingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.Body != nil {
		r.Body.Close()
	}
	return nil, f.err
}

// defaultTransport is built where every registry client of the project
// gets its base transport, rafs/registry.NewTransport (connections to
// link-local and metadata addresses are refused), with
// remote.DefaultTransport's timeouts and pool. One for the process, so
// connections are reused across calls.
var defaultTransport = func() *http.Transport {
	t := registry.NewTransport(30*time.Second, 0)
	t.TLSHandshakeTimeout = 10 * time.Second
	t.ExpectContinueTimeout = time.Second
	t.MaxIdleConns = 100
	t.MaxIdleConnsPerHost = 50
	return t
}()

// remoteOptions translates o into go-containerregistry remote options.
func (o Options) remoteOptions(ctx context.Context) []remote.Option {
	ro := []remote.Option{
		remote.WithContext(ctx),
		remote.WithAuthFromKeychain(o.keychain()),
		remote.WithTransport(o.roundTripper()),
		remote.WithPlatform(o.platform()),
	}
	if o.UserAgent != "" {
		ro = append(ro, remote.WithUserAgent(o.UserAgent))
	}
	return ro
}

// registryName returns r's registry reference, made insecure when opts or
// the host ask for it. Parse already did so, but a Ref may have been parsed
// with other options or built by hand.
func registryName(r Ref, opts Options) (name.Reference, error) {
	if r.Name == nil {
		return nil, fmt.Errorf("%w: docker reference has no image name", ErrBadReference)
	}
	reg := r.Name.Context().Registry
	if reg.Scheme() == "http" || !(opts.Insecure || isLoopback(reg.RegistryStr())) {
		return r.Name, nil
	}
	ref, err := name.ParseReference(r.Name.String(), name.Insecure)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrBadReference, err)
	}
	return ref, nil
}

// isLoopback reports whether host ("host" or "host:port") is localhost, an
// address in 127.0.0.0/8 or ::1.
func isLoopback(host string) bool {
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	host = strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip := net.ParseIP(host)
	return ip != nil && ip.IsLoopback()
}
