package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	lru "github.com/hashicorp/golang-lru/v2"
	"golang.org/x/sync/singleflight"

	retry "damselfly/rafs/backoff"
)

// Client talks to origin registries on behalf of the proxy's clients
// (or, with WithKeychain, of its own user). It keeps one authenticated
// session per registry, repository and credentials. Safe for concurrent
// use.
type Client struct {
	cfg      Config
	log      *slog.Logger
	tr       *http.Transport   // built by New; nil with WithTransport
	base     http.RoundTripper // below authentication: the origin policy over tr
	plain    *http.Client      // base without authentication
	sessions *lru.Cache[string, *session]
	flight   singleflight.Group // handshakes, by session key
	creds    *nodeCreds
	keychain authn.Keychain // the node's credentials instead of creds
	def      string         // the default registry, normalised
	reach    reachBook      // what each registry host answered lately
}

// Option configures New.
type Option func(*Client)

// WithTransport sets the HTTP transport below authentication and the
// origin policy, instead of NewTransport's; Close leaves it alone.
func WithTransport(rt http.RoundTripper) Option {
	return func(c *Client) { c.base = &policyTransport{inner: &reachTransport{inner: rt, book: &c.reach}, c: c} }
}

// WithKeychain makes kc the source of the node's credentials instead of
// Config.DockerConfigFile, and lends them to every registry: for a client
// that reads for its own user (the mount daemon), not for others. They
// are resolved in a handshake, when the registry is first talked to, and
// again after the registry refused them.
func WithKeychain(kc authn.Keychain) Option { return func(c *Client) { c.keychain = kc } }

// New returns a Client. log may be nil. It does not contact any registry.
func New(cfg Config, log *slog.Logger, opts ...Option) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("registry config: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	var def string
	if cfg.DefaultRegistry != "" {
		u, err := parseBase(cfg.DefaultRegistry, cfg.PlainHTTP)
		if err != nil {
			return nil, err
		}
		def = u.String()
	}
	sessions, err := lru.New[string, *session](maxSessions)
	if err != nil {
		return nil, err
	}
	c := &Client{cfg: cfg, log: log, sessions: sessions, creds: &nodeCreds{path: cfg.DockerConfigFile}, def: def}
	for _, o := range opts {
		o(c)
	}
	if c.base == nil {
		c.tr = NewTransport(cfg.ConnectTimeout, cfg.Timeout)
		c.base = &policyTransport{inner: &reachTransport{inner: c.tr, book: &c.reach}, c: c}
	}
	c.plain = &http.Client{Transport: c.base, CheckRedirect: c.checkRedirect}
	return c, nil
}

// Close releases idle connections.
func (c *Client) Close() {
	if c.tr != nil {
		c.tr.CloseIdleConnections()
	}
}

// DefaultRegistry is the base URL used when a request names no registry,
// or ErrNoRegistry when none is configured.
func (c *Client) DefaultRegistry() (string, error) {
	if c.def == "" {
		return "", ErrNoRegistry
	}
	return c.def, nil
}

// ErrNoRegistry is returned for a request that names no registry when
// the client has no default_registry.
var ErrNoRegistry = errors.New("the request names no registry and no default_registry is configured")

// RegistryForHost returns the base URL of registry host ("host[:port]"):
// http:// for PlainHTTP and loopback hosts, https:// otherwise. Loopback
// registries are taken to speak plain HTTP, as containerd takes them
// (its hosts "localhost" rule), so that ?ns=127.0.0.1:5000 needs no
// plain_http entry.
func (c *Client) RegistryForHost(host string) (string, error) {
	if strings.EqualFold(host, "docker.io") {
		host = "registry-1.docker.io" // what containerd's ns names Docker Hub
	}
	scheme := "https://"
	if contains(c.cfg.PlainHTTP, host) || isLoopback(host) {
		scheme = "http://"
	}
	u, err := parseBase(scheme+host, c.cfg.PlainHTTP)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// CheckRegistry validates a registry base URL named by a client and
// returns it normalised ("scheme://host[:port]"). Plain http is allowed
// to loopback and PlainHTTP hosts only.
func (c *Client) CheckRegistry(base string) (string, error) {
	u, err := parseBase(base, c.cfg.PlainHTTP)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// registryOf is ref's registry, checked and normalised; empty means the
// default registry.
func (c *Client) registryOf(ref Ref) (string, error) {
	if ref.Registry == "" {
		return c.DefaultRegistry()
	}
	return c.CheckRegistry(ref.Registry)
}

// send does one request to the registry of ref, authenticating as ref
// says: with the client's credentials (a bearer token sent as it is, or
// Basic credentials sent or traded for a token), with the node's where
// they are lent and the client sent none, or anonymously. Without
// credentials and without anon, the request goes as it is, so that a
// challenge reaches the caller for its client to answer; with anon, a
// bearer challenge is answered with an anonymous token. A 401 makes the
// next request start from a fresh handshake. build must return a fresh
// request on every call.
func (c *Client) send(ctx context.Context, ref Ref, build func() (*http.Request, error), anon bool) (*http.Response, error) {
	base, err := c.registryOf(ref)
	if err != nil {
		return nil, err
	}
	creds, keychain := c.credentials(ref, base)
	if creds == "" && !keychain && !anon {
		return c.do(c.plain, build, "")
	}
	key := sessionKey(base, ref.Repo, creds, keychain)
	s, err := c.session(ctx, key, base, ref.Repo, creds, keychain)
	if refused(err) {
		// The token server refused the credentials. The registry's own
		// 401 says so best, challenge included, and go-containerregistry
		// keeps no response of its handshake: ask the registry once more
		// as the client would have.
		c.log.Debug("token refused", "registry", base, "repo", ref.Repo, "err", err)
		return c.do(c.plain, build, creds)
	}
	if err != nil {
		return nil, err
	}
	resp, err := c.do(s.client, build, "")
	if err != nil {
		err = fromGGCR(err)
		if refused(err) { // a renewal refused mid-session
			c.drop(key, s)
			return c.do(c.plain, build, creds)
		}
		return nil, err
	}
	if resp.StatusCode == http.StatusUnauthorized {
		c.drop(key, s)
		if up := c.upgrade(ctx, key, resp, base, ref.Repo, creds, keychain); up != nil {
			drain(resp)
			if resp, err = c.do(up.client, build, ""); err != nil {
				return nil, fromGGCR(err)
			}
		}
	}
	return resp, nil
}

// credentials are what a request for ref is sent with: the client's
// Authorization; else the node's, where Config.LendNodeCredentials (or
// WithKeychain) lends them (keychain: resolved in the handshake); else
// none.
func (c *Client) credentials(ref Ref, base string) (creds string, keychain bool) {
	if ref.Authorization != "" {
		return ref.Authorization, false
	}
	_, host, _ := strings.Cut(base, "://")
	switch {
	case c.keychain != nil:
		return "", true
	case !c.lends(host):
		return "", false // anonymous: the node's credentials are not lent
	}
	creds, err := c.creds.get(host)
	if err != nil {
		c.log.Warn("node credentials unusable", "registry", host, "err", err)
	}
	return creds, false
}

// lends reports whether requests without credentials to registry host
// are sent with the node's own (Config.LendNodeCredentials).
func (c *Client) lends(host string) bool {
	if contains(c.cfg.LendNodeCredentials, host) {
		return true
	}
	switch strings.ToLower(host) { // Docker Hub has several names
	case "registry-1.docker.io", "index.docker.io", "docker.io":
		for _, h := range []string{"registry-1.docker.io", "index.docker.io", "docker.io"} {
			if contains(c.cfg.LendNodeCredentials, h) {
				return true
			}
		}
	}
	return false
}

// do sends the request build makes with hc, with Authorization authz if
// not empty.
func (c *Client) do(hc *http.Client, build func() (*http.Request, error), authz string) (*http.Response, error) {
	req, err := build()
	if err != nil {
		return nil, err
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := hc.Do(req)
	if err != nil {
		// A refused redirect comes with the redirect's response (body
		// closed): nothing of it may reach a client.
		return nil, withoutQuery(err)
	}
	return resp, nil
}

// withoutQuery drops the query of the URL an http.Client error names: a
// redirect to blob storage carries its signature there, and the error
// goes to logs and to clients.
func withoutQuery(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		if u, perr := url.Parse(ue.URL); perr == nil && (u.RawQuery != "" || u.User != nil) {
			u.RawQuery, u.User = "", nil
			ue.URL = u.String() + "?REDACTED"
		}
	}
	return err
}

// drain reads a little of a response body, so the connection can be
// reused, and closes it.
func drain(resp *http.Response) {
	io.CopyN(io.Discard, resp.Body, 64<<10)
	resp.Body.Close()
}

// The backoff schedule between retries is the project's (rafs/backoff):
// 100 ms doubling to 5 s; a server's Retry-After is honoured up to
// maxRetryAfter.
var (
	backoffBase = retry.Default.First
	backoffMax  = retry.Default.Max
)

const maxRetryAfter = 30 * time.Second

// backoff is the wait after the n-th failure (n >= 1): the project's
// backoff, or the server's Retry-After if longer (up to maxRetryAfter).
func backoff(n int, serverWait time.Duration) time.Duration {
	return max(retry.Default.Delay(n, rand.Float64()), min(serverWait, maxRetryAfter))
}

// sleep waits d or until ctx is done.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// retryAfter is the server's requested wait carried by err, if any.
func retryAfter(err error) time.Duration {
	var se *StatusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
