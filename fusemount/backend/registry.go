package backend

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	gcrtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"

	"damselfly/rafs"
)

// registry is the origin registry of one repository. Its authenticated
// client is built on first use (so a Backend starts while the registry is
// down) by go-containerregistry's handshake: ping, then a bearer token
// for pull scope, or Basic. That transport renews the token itself when
// the registry answers 401 with a challenge; registry also throws the
// client away on any 401 that reaches it, so the next attempt starts from
// a fresh handshake. It is safe for concurrent use.
type regClient struct {
	scheme string // "http" or "https"
	repo   name.Repository
	base   http.RoundTripper // below the auth transport; records Authorization
	auth   func(context.Context) (authn.Authenticator, error)

	sem chan struct{} // one handshake at a time, waitable with a ctx

	mu     sync.Mutex
	client *http.Client // nil until the handshake
	gen    uint64       // counts handshakes, so a stale 401 drops nothing newer

	lastAuth   atomic.Pointer[string] // Authorization last sent to the registry
	staticAuth string                 // "Basic <Config.Auth>", or ""
}

func newRegistry(cfg Config, base http.RoundTripper, kc authn.Keychain) (*regClient, error) {
	var opts []name.Option
	if cfg.Scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(cfg.Host+"/"+cfg.Repo, opts...)
	if err != nil {
		return nil, fmt.Errorf("repository %s/%s: %w", cfg.Host, cfg.Repo, err)
	}
	r := &regClient{scheme: cfg.Scheme, repo: repo, sem: make(chan struct{}, 1)}
	r.base = &recordAuth{inner: base, host: repo.RegistryStr(), last: &r.lastAuth}
	if cfg.Auth != "" {
		user, pass, err := decodeAuth(cfg.Auth.Reveal())
		if err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		r.staticAuth = "Basic " + cfg.Auth.Reveal()
		a := authn.FromConfig(authn.AuthConfig{Username: user, Password: pass})
		r.auth = func(context.Context) (authn.Authenticator, error) { return a, nil }
	} else {
		r.auth = func(ctx context.Context) (authn.Authenticator, error) { return authn.Resolve(ctx, kc, repo) }
	}
	return r, nil
}

// origin is "scheme://host", the X-Damselfly-Registry value.
func (r *regClient) origin() string { return r.scheme + "://" + r.repo.RegistryStr() }

func (r *regClient) blobPath(d rafs.Digest) string {
	return "/v2/" + r.repo.RepositoryStr() + "/blobs/" + d.String()
}

// authorization is what a mirror needs to fetch from the registry on our
// behalf: the Authorization header last sent to the registry (a bearer
// token or Basic credentials); before any was, Basic with Config.Auth if
// set, else "". Credentials from the keychain are not sent until the
// registry has been talked to: resolving them may run a credential
// helper, which has no place on the proxy's fast path.
func (r *regClient) authorization() string {
	if p := r.lastAuth.Load(); p != nil {
		return *p
	}
	return r.staticAuth
}

// read fills p with bytes [off, off+len(p)) of blob d. ctx bounds the
// handshake too, if one is due.
func (r *regClient) read(ctx context.Context, d rafs.Digest, off int64, p []byte) error {
	c, gen, err := r.authorized(ctx)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, r.origin()+r.blobPath(d), nil)
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	req.Header.Set("Range", rangeHeader(off, len(p)))
	err = r.classify(doRange(c, req, off, p))
	if errors.Is(err, ErrUnauthorized) {
		r.invalidate(gen)
	}
	return err
}

// authorized returns the authenticated client, doing the handshake if
// there is none.
func (r *regClient) authorized(ctx context.Context) (*http.Client, uint64, error) {
	if c, gen := r.current(); c != nil {
		return c, gen, nil
	}
	select {
	case r.sem <- struct{}{}:
	case <-ctx.Done():
		return nil, 0, ctx.Err()
	}
	defer func() { <-r.sem }()
	if c, gen := r.current(); c != nil { // another reader finished it meanwhile
		return c, gen, nil
	}
	a, err := r.auth(ctx)
	if err != nil {
		return nil, 0, fmt.Errorf("%w: resolve credentials for %s: %w", errPermanent, r.repo.RegistryStr(), err)
	}
	rt, err := gcrtransport.NewWithContext(ctx, r.repo.Registry, a, r.base, []string{r.repo.Scope(gcrtransport.PullScope)})
	if err != nil {
		err = r.classify(err)
		if !handshakeTransient(err) {
			err = fmt.Errorf("%w: %w", errPermanent, err)
		}
		return nil, 0, fmt.Errorf("authenticate to %s for %s: %w", r.repo.RegistryStr(), r.repo.RepositoryStr(), err)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	r.gen++
	r.client = &http.Client{Transport: rt}
	return r.client, r.gen, nil
}

func (r *regClient) current() (*http.Client, uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.client, r.gen
}

// invalidate drops the client of handshake gen, if it is still current.
func (r *regClient) invalidate(gen uint64) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.gen == gen {
		r.client = nil
	}
}

// classify turns go-containerregistry's status errors (from the ping or
// the token server) into statusErrors, so they map to our sentinels, and
// marks a refused certificate permanent when https was asked for.
func (r *regClient) classify(err error) error {
	if err == nil {
		return nil
	}
	var terr *gcrtransport.Error
	if errors.As(err, &terr) {
		return &statusError{Code: terr.StatusCode, Msg: terr.Error(), cause: err}
	}
	var (
		unknownCA x509.UnknownAuthorityError
		badHost   x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if r.scheme == "https" && (errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &invalid)) {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	return err
}

// handshakeTransient reports whether a failed handshake may succeed
// later: the network failed, or a server answered with a status. Anything
// else is go-containerregistry refusing what it was told (a malformed
// challenge, a token realm on a private address other than the
// registry's), which waiting does not fix.
func handshakeTransient(err error) bool {
	var (
		se   *statusError
		nerr net.Error
	)
	return errors.As(err, &se) || errors.As(err, &nerr) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}

// recordAuth notes the Authorization header of requests to the registry
// host, which the auth transport above it sets.
type recordAuth struct {
	inner http.RoundTripper
	host  string
	last  *atomic.Pointer[string]
}

func (t *recordAuth) RoundTrip(req *http.Request) (*http.Response, error) {
	if req.URL.Host == t.host {
		if a := req.Header.Get("Authorization"); a != "" {
			t.last.Store(&a)
		}
	}
	return t.inner.RoundTrip(req)
}
