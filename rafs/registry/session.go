package registry

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// maxSessions bounds the sessions kept, least recently used first out.
const maxSessions = 4096

// session is go-containerregistry's authenticated transport for one
// registry, repository and set of credentials. Its handshake pinged the
// registry and, when challenged for a bearer token, got one for pulling
// the repository (trading Basic credentials for it, or anonymously); it
// renews the token itself when the registry answers 401 with a
// challenge. Safe for concurrent use.
type session struct {
	client *http.Client
	// last is the Authorization last sent to the registry host (a
	// bearer token, or Basic credentials), nil before any was.
	last atomic.Pointer[string]
}

// sessionKey names the session for pulling repo of base with creds;
// creds are hashed so the cache holds no password as a key, and hashed
// whole: two credentials that shared a key would share a session, and
// one client would be sent with another's token. keychain marks the
// node's keychain (WithKeychain), resolved in the handshake.
func sessionKey(base, repo, creds string, keychain bool) string {
	if keychain {
		return base + "|" + repo + "|keychain"
	}
	h := sha256.Sum256([]byte(creds))
	return base + "|" + repo + "|" + hex.EncodeToString(h[:])
}

// session returns the session of key, doing the handshake if there is
// none, one at a time per key: concurrent requests that all need it share
// it. The handshake is not cancelled when one waiter gives up;
// Config.Timeout bounds it.
func (c *Client) session(ctx context.Context, key, base, repo, creds string, keychain bool) (*session, error) {
	if s, ok := c.sessions.Get(key); ok {
		return s, nil
	}
	res := c.flight.DoChan(key, func() (any, error) {
		if s, ok := c.sessions.Get(key); ok {
			return s, nil // made by a flight that just ended
		}
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), c.cfg.Timeout)
		defer cancel()
		s, err := c.handshake(hctx, base, repo, creds, keychain, nil)
		if err != nil {
			return nil, err
		}
		c.sessions.Add(key, s)
		return s, nil
	})
	select {
	case r := <-res:
		if r.Err != nil {
			return nil, r.Err
		}
		return r.Val.(*session), nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// drop forgets the session of key if it is still s: the registry refused
// what it sent, so the next request starts from a fresh handshake (and,
// with a keychain, fresh credentials).
func (c *Client) drop(key string, s *session) {
	if cur, ok := c.sessions.Peek(key); ok && cur == s {
		c.sessions.Remove(key)
	}
}

// handshake builds the session: go-containerregistry's ping, challenge
// and token exchange, over the Client's base transport (the origin policy
// and the dial guard apply to every request it sends, the token
// server's included).
//
// With ch, a bearer challenge the registry answered a request with, the
// ping is skipped and a token is got for it (see upgrade).
func (c *Client) handshake(ctx context.Context, base, repo, creds string, keychain bool, ch *challenge) (*session, error) {
	scheme, host, _ := strings.Cut(base, "://")
	var opts []name.Option
	if scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	reg, err := name.NewRegistry(host, opts...)
	if err != nil {
		return nil, fmt.Errorf("registry %s: %w", base, err)
	}
	var auth authn.Authenticator
	if keychain {
		if auth, err = authn.Resolve(ctx, c.keychain, reg.Repo(repo)); err != nil {
			return nil, fmt.Errorf("%w: credentials for %s: %w", errCredentials, host, err)
		}
	} else if auth, err = authenticator(creds); err != nil {
		return nil, err
	}
	s := &session{}
	// go-containerregistry races https against http for hosts it thinks
	// local; sessionBase holds the registry to the scheme asked for.
	t := transport.NewUserAgent(&sessionBase{inner: c.base, scheme: scheme, host: host, last: &s.last}, "damselfly")
	scopes := []string{reg.Repo(repo).Scope(transport.PullScope)}
	var rt http.RoundTripper
	if ch != nil {
		pr := &transport.Challenge{Scheme: "bearer", Parameters: ch.params, Insecure: scheme == "http"}
		var tok *transport.Token
		if tok, err = transport.Exchange(ctx, reg, auth, t, scopes, pr); err == nil {
			rt, err = transport.FromToken(reg, auth, t, pr, tok)
		}
	} else {
		rt, err = transport.NewWithContext(ctx, reg, auth, t, scopes)
	}
	if notRegistryPing(err, host) {
		// The API version check answered neither 200 nor 401 (a storage
		// front or a mirror that serves only what it holds): send the
		// credentials as they are, as a client that does not ping would.
		rt, err = transport.FromToken(reg, auth, t, &transport.Challenge{Scheme: "basic", Insecure: scheme == "http"}, &transport.Token{})
	}
	if err != nil {
		return nil, fmt.Errorf("authenticate to %s for %s: %w", host, repo, fromGGCR(err))
	}
	s.client = &http.Client{Transport: rt, CheckRedirect: c.checkRedirect}
	return s, nil
}

// upgrade answers a bearer challenge that a session without a token met:
// the registry's version check asked for none (an open /v2/), but the
// repository does. It makes, and keeps under key, a session with a token
// for the challenge, as registry clients do, or returns nil (and the
// 401 stands) when there is none to make: the request already carried a
// bearer token (go-containerregistry renewed it already, or it is the
// client's), the challenge is not a bearer one, or the token server
// refused.
func (c *Client) upgrade(ctx context.Context, key string, resp *http.Response, base, repo, creds string, keychain bool) *session {
	if resp.Request != nil && strings.HasPrefix(strings.ToLower(resp.Request.Header.Get("Authorization")), "bearer ") {
		return nil
	}
	ch, err := parseChallenge(resp.Header.Get("WWW-Authenticate"))
	if err != nil || ch.scheme != "bearer" {
		return nil
	}
	hctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	s, err := c.handshake(hctx, base, repo, creds, keychain, &ch)
	if err != nil {
		c.log.Debug("token for a repository's challenge", "registry", base, "repo", repo, "err", err)
		return nil
	}
	c.sessions.Add(key, s)
	return s
}

// errCredentials marks credentials that could not be read or resolved.
// It is permanent.
var errCredentials = errors.New("unusable credentials")

// authenticator turns an Authorization value into go-containerregistry
// credentials: a bearer token is sent as it is (RegistryToken), Basic
// credentials are sent or traded for a token, "" is anonymous.
func authenticator(authz string) (authn.Authenticator, error) {
	if authz == "" {
		return authn.Anonymous, nil
	}
	scheme, value, _ := strings.Cut(authz, " ")
	value = strings.TrimSpace(value)
	switch strings.ToLower(scheme) {
	case "bearer":
		return authn.FromConfig(authn.AuthConfig{RegistryToken: value}), nil
	case "basic":
		raw, err := base64.StdEncoding.DecodeString(value)
		if err != nil || !strings.Contains(string(raw), ":") {
			return nil, fmt.Errorf("%w: Basic credentials are not base64(user:password)", errCredentials)
		}
		user, pass, _ := strings.Cut(string(raw), ":")
		return authn.FromConfig(authn.AuthConfig{Username: user, Password: pass, Auth: value}), nil
	default:
		return nil, fmt.Errorf("%w: Authorization scheme %q", errCredentials, scheme)
	}
}

// fromGGCR turns go-containerregistry's status errors (from the ping or
// the token server) into StatusErrors, so that callers classify them as
// they do the registry's own answers.
func fromGGCR(err error) error {
	var terr *transport.Error
	if errors.As(err, &terr) {
		return &StatusError{Code: terr.StatusCode, Msg: withoutQuery(err).Error()}
	}
	return withoutQuery(err)
}

// notRegistryPing reports whether err is the API version check of host
// answered with a status that is neither an answer (200, 401) nor a
// transient failure.
func notRegistryPing(err error, host string) bool {
	var terr *transport.Error
	if !errors.As(err, &terr) || terr.Request == nil || terr.Request.URL.Path != "/v2/" || !strings.EqualFold(terr.Request.URL.Host, host) {
		return false
	}
	return !(&StatusError{Code: terr.StatusCode}).Transient()
}

// refused reports whether err is a token server (or a renewal) refusing
// the credentials: a 401 or 403 that did not come as a response to the
// request itself.
func refused(err error) bool {
	var se *StatusError
	if errors.As(err, &se) {
		return se.Code == http.StatusUnauthorized || se.Code == http.StatusForbidden
	}
	var terr *transport.Error
	return errors.As(err, &terr) && (terr.StatusCode == http.StatusUnauthorized || terr.StatusCode == http.StatusForbidden)
}

// sessionBase is the base transport as one session sees it: requests to
// the registry host keep the session's scheme (go-containerregistry's
// ping may settle on http for a host it thinks local), and the
// Authorization sent to that host is recorded (Client.Authorization).
type sessionBase struct {
	inner  http.RoundTripper
	scheme string
	host   string
	last   *atomic.Pointer[string]
}

func (t *sessionBase) RoundTrip(req *http.Request) (*http.Response, error) {
	if strings.EqualFold(req.URL.Host, t.host) {
		if req.URL.Scheme != t.scheme {
			req = req.Clone(req.Context())
			req.URL.Scheme = t.scheme
		}
		if a := req.Header.Get("Authorization"); a != "" {
			t.last.Store(&a)
		}
	}
	return t.inner.RoundTrip(req)
}

// Authorization is the Authorization header the Client last sent to the
// registry of ref for ref's repository and credentials (a bearer token it
// got for them, or the Basic credentials themselves), or "" if it has
// not talked to that registry for them yet, or forgot the session. It
// sends nothing: a mirror can be handed what the registry accepted
// without a credential helper running on the caller's fast path.
func (c *Client) Authorization(ref Ref) string {
	base, err := c.registryOf(ref)
	if err != nil {
		return ""
	}
	creds, keychain := c.credentials(ref, base)
	s, ok := c.sessions.Peek(sessionKey(base, ref.Repo, creds, keychain))
	if !ok {
		return ""
	}
	if p := s.last.Load(); p != nil {
		return *p
	}
	return ""
}
