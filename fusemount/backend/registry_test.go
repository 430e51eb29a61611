package backend

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"golang.org/x/sync/errgroup"
)

// Tokens that expire in the middle of a long job are renewed and the
// request retried; no read fails. go-containerregistry's bearer transport
// renews on a 401 that carries a challenge; a bare 401 makes the backend
// start a fresh handshake itself.
func TestBearerTokenExpiresMidJob(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name       string
		challenge  bool
		uses       int
		ttl        time.Duration
		concurrent int
	}{
		{"expires after 3 requests, challenge", true, 3, 0, 1},
		{"expires after 3 requests, bare 401", false, 3, 0, 1},
		{"expires after 30ms, concurrent readers", true, 0, 30 * time.Millisecond, 4},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			ts := &tokenServer{user: "alice", pass: "secret", uses: tt.uses, ttl: tt.ttl, challengeOnExpiry: tt.challenge}
			o := newOrigin(t, ts.wrap)
			data := randomBytes(30, 128<<10)
			blob := o.put(t, data)
			cfg := o.config()
			cfg.Auth = b64("alice:secret")
			b := newBackend(t, cfg)

			const reads = 40
			var g errgroup.Group
			g.SetLimit(tt.concurrent)
			for i := range reads {
				g.Go(func() error {
					off, n := int64(i*3000), 3000
					p := make([]byte, n)
					if err := b.ReadBlob(t.Context(), blob, off, p); err != nil {
						return fmt.Errorf("read %d: %w", i, err)
					}
					if string(p) != string(data[off:off+int64(n)]) {
						return fmt.Errorf("read %d: wrong bytes", i)
					}
					if tt.ttl > 0 && i%5 == 4 {
						time.Sleep(tt.ttl) // let the token lapse mid-job
					}
					return nil
				})
			}
			if err := g.Wait(); err != nil {
				t.Fatal(err)
			}
			if ts.issued.Load() < 2 || ts.expired.Load() < 1 {
				t.Errorf("tokens issued %d, expired-token requests %d: want the token renewed mid-job", ts.issued.Load(), ts.expired.Load())
			}
			st := b.Stats().Registry
			if st.Bytes != reads*3000 {
				t.Errorf("stats: got %+v, want %d bytes", st, reads*3000)
			}
			t.Logf("%d tokens issued, %d requests with an expired token, stats %+v", ts.issued.Load(), ts.expired.Load(), st)
		})
	}
}

func TestBearerBadCredentialsFailFast(t *testing.T) {
	t.Parallel()
	ts := &tokenServer{user: "alice", pass: "secret"}
	o := newOrigin(t, ts.wrap)
	blob := o.put(t, randomBytes(31, 100))
	cfg := o.config()
	cfg.Auth = b64("alice:wrong")
	clock := newStepClock()
	b := newBackend(t, cfg, WithClock(clock))
	_, err := b.ReadBlobFrom(t.Context(), blob, 0, make([]byte, 10))
	if !errors.Is(err, ErrUnauthorized) {
		t.Fatalf("got %v, want ErrUnauthorized", err)
	}
	if st := b.Stats().Registry; st.Requests != 2 {
		t.Errorf("requests: got %d, want 2 (one retry with a fresh handshake)", st.Requests)
	}
	if w := clock.waits(); len(w) != 0 {
		t.Errorf("waited %v, want no backoff for refused credentials", w)
	}
}

func TestBasicAuth(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		auth    Secret
		kc      authn.Keychain
		wantErr error
	}{
		{"config auth", b64("bob:hunter2"), nil, nil},
		{"keychain", "", staticKeychain{authn.FromConfig(authn.AuthConfig{Username: "bob", Password: "hunter2"})}, nil},
		{"anonymous is refused", "", staticKeychain{authn.Anonymous}, ErrUnauthorized},
		{"wrong password", b64("bob:nope"), nil, ErrUnauthorized},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			o := newOrigin(t, basicAuth("bob", "hunter2"))
			data := randomBytes(32, 10000)
			blob := o.put(t, data)
			cfg := o.config()
			cfg.Auth = tt.auth
			opts := []Option{WithClock(newStepClock())}
			if tt.kc != nil {
				opts = append(opts, WithKeychain(tt.kc))
			}
			b := newBackend(t, cfg, opts...)
			if tt.wantErr == nil {
				for _, off := range []int64{0, 5000, 9990} {
					readAt(t, b, blob, data, off, 10)
				}
				return
			}
			if _, err := b.ReadBlobFrom(t.Context(), blob, 0, make([]byte, 10)); !errors.Is(err, tt.wantErr) {
				t.Fatalf("got %v, want %v", err, tt.wantErr)
			}
		})
	}
}

// The handshake happens on the first read, not in New, so a mount starts
// while the registry is down and its reads wait for it.
func TestNewDoesNotContactRegistry(t *testing.T) {
	t.Parallel()
	var hits atomic.Int64
	o := newOrigin(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			hits.Add(1)
			next.ServeHTTP(w, r)
		})
	})
	b := newBackend(t, o.config())
	if n := hits.Load(); n != 0 {
		t.Fatalf("New sent %d requests, want 0", n)
	}
	blob := o.put(t, randomBytes(33, 10))
	if err := b.ReadBlob(t.Context(), blob, 0, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
}

type staticKeychain struct{ a authn.Authenticator }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) { return k.a, nil }

// go-containerregistry refuses a token realm on a private or loopback
// address other than the registry's own host:port (an SSRF guard). That
// is a configuration problem: the read fails at once and says so.
func TestBearerRealmElsewhereFailsFast(t *testing.T) {
	t.Parallel()
	ts := &tokenServer{user: "alice", pass: "secret"}
	tokens := newOrigin(t, ts.wrap) // serves /token on another port
	o := newOrigin(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="%s/token",service="test"`, tokens.srv.URL))
			http.Error(w, "unauthorized", http.StatusUnauthorized)
		})
	})
	blob := o.put(t, randomBytes(34, 10))
	cfg := o.config()
	cfg.Auth = b64("alice:secret")
	clock := newStepClock()
	b := newBackend(t, cfg, WithClock(clock))
	_, err := b.ReadBlobFrom(t.Context(), blob, 0, make([]byte, 10))
	if err == nil || !strings.Contains(err.Error(), "realm") || errors.Is(err, ErrDeadline) {
		t.Fatalf("got %v, want an immediate error about the realm", err)
	}
	if w := clock.waits(); len(w) != 0 {
		t.Errorf("waited %v, want no retries", w)
	}
}
