package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"golang.org/x/sync/singleflight"

	retry "damselfly/rafs/backoff"
)

// Client talks to origin registries on behalf of the proxy's clients.
// It keeps bearer tokens per registry, repository and credentials. Safe
// for concurrent use.
type Client struct {
	cfg    Config
	log    *slog.Logger
	hc     *http.Client
	tr     *http.Transport
	tokens *tokenCache
	flight singleflight.Group // token fetches, by token key
	creds  *nodeCreds
	def    string // the default registry, normalised
}

// New returns a Client. log may be nil.
func New(cfg Config, log *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("upstream config: %w", err)
	}
	cfg = cfg.withDefaults()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	def, err := parseBase(cfg.DefaultRegistry, cfg.PlainHTTP)
	if err != nil {
		return nil, err
	}
	dialer := &net.Dialer{Timeout: cfg.ConnectTimeout, KeepAlive: 30 * time.Second, Control: guardDial}
	tr := &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   cfg.ConnectTimeout,
		ResponseHeaderTimeout: cfg.Timeout,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
	}
	c := &Client{cfg: cfg, log: log, tr: tr, tokens: newTokenCache(), creds: &nodeCreds{path: cfg.DockerConfigFile}, def: def.String()}
	c.hc = &http.Client{Transport: tr, CheckRedirect: c.checkRedirect}
	return c, nil
}

// Close releases idle connections.
func (c *Client) Close() { c.tr.CloseIdleConnections() }

// DefaultRegistry is the base URL used when a request names no registry.
func (c *Client) DefaultRegistry() string { return c.def }

// RegistryForHost returns the base URL of registry host ("host[:port]"):
// http:// for PlainHTTP hosts, https:// otherwise.
func (c *Client) RegistryForHost(host string) (string, error) {
	if strings.EqualFold(host, "docker.io") {
		host = "registry-1.docker.io" // what containerd's ns names Docker Hub
	}
	scheme := "https://"
	if contains(c.cfg.PlainHTTP, host) {
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
		return c.def, nil
	}
	return c.CheckRegistry(ref.Registry)
}

// send does one request to the registry of ref, authenticating as ref
// says: a client's bearer token is sent as it is; Basic credentials (the
// client's, or the node's when the client sent none) are sent as they
// are or traded for a bearer token when the registry challenges for one.
// With anon, a bearer challenge is answered with an anonymous token when
// there are no credentials; without it, such a 401 is returned to the
// caller. build must return a fresh request on every call.
func (c *Client) send(ctx context.Context, ref Ref, build func() (*http.Request, error), anon bool) (*http.Response, error) {
	base, err := c.registryOf(ref)
	if err != nil {
		return nil, err
	}
	host := strings.SplitN(base, "://", 2)[1]
	creds := ""
	bearer := false
	switch {
	case ref.Authorization == "":
		if !c.lends(host) {
			break // anonymous: the node's credentials are not lent
		}
		if creds, err = c.creds.get(host); err != nil {
			c.log.Warn("node credentials unusable", "registry", host, "err", err)
		}
	case strings.HasPrefix(strings.ToLower(ref.Authorization), "basic "):
		creds = ref.Authorization
	default:
		bearer = true
	}
	key := tokenKey(base, ref.Repo, creds)

	authz := ref.Authorization
	if !bearer {
		if tok := c.tokens.get(key, time.Now()); tok != "" {
			authz = "Bearer " + tok
		} else {
			authz = creds
		}
	}
	resp, err := c.do(build, authz)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || bearer {
		return resp, err
	}
	// 401: answer the challenge once, if we can.
	ch, cerr := parseChallenge(resp.Header.Get("WWW-Authenticate"))
	if cerr != nil {
		return resp, nil
	}
	switch {
	case ch.scheme == "bearer" && (creds != "" || anon):
		c.tokens.drop(key)
		tok, err := c.token(ctx, key, ch, ref.Repo, creds)
		var se *StatusError
		if errors.As(err, &se) && !se.Transient() {
			// The token server refused the credentials: the registry's
			// own 401 says so best, challenge included.
			c.log.Debug("token refused", "registry", host, "repo", ref.Repo, "err", err)
			return resp, nil
		}
		if err != nil {
			drain(resp)
			return nil, err
		}
		authz = "Bearer " + tok
	case ch.scheme == "basic" && creds != "" && authz != creds:
		authz = creds
	default:
		return resp, nil
	}
	drain(resp)
	return c.do(build, authz)
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

// token fetches and caches a token for key, one fetch at a time per key:
// concurrent reads that all met the challenge share it. The fetch is not
// cancelled when one waiter gives up; the token server timeout bounds it.
func (c *Client) token(ctx context.Context, key string, ch challenge, repo, creds string) (string, error) {
	res := c.flight.DoChan(key, func() (any, error) {
		if tok := c.tokens.get(key, time.Now()); tok != "" {
			return tok, nil // fetched by a flight that just ended
		}
		tok, exp, err := c.fetchToken(context.WithoutCancel(ctx), ch, repo, creds)
		if err != nil {
			return "", err
		}
		c.tokens.put(key, tok, exp, time.Now())
		return tok, nil
	})
	select {
	case r := <-res:
		if r.Err != nil {
			return "", r.Err
		}
		return r.Val.(string), nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}

func (c *Client) do(build func() (*http.Request, error), authz string) (*http.Response, error) {
	req, err := build()
	if err != nil {
		return nil, err
	}
	if authz != "" {
		req.Header.Set("Authorization", authz)
	}
	resp, err := c.hc.Do(req)
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
