package registry_test

import (
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// A registry whose blob GETs redirect to target, counting them.
func redirectingRegistry(t *testing.T, target string, gets *atomic.Int32) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.Path, "/blobs/") {
			gets.Add(1)
			w.Header().Set("Location", target)
			w.WriteHeader(http.StatusTemporaryRedirect)
			w.Write([]byte("SECRET-REDIRECT-BODY"))
			return
		}
		http.NotFound(w, r)
	}))
	t.Cleanup(srv.Close)
	return srv
}

func TestRedirectPolicy(t *testing.T) {
	t.Parallel()
	blob := rafs.Digest{1}
	for _, tc := range []struct {
		name, target string
	}{
		{"metadata service", "http://169.254.169.254/latest/meta-data/"},
		{"link-local over https", "https://169.254.10.10/blob"},
		{"IPv6 metadata", "https://[fd00:ec2::254]/blob"},
		{"IPv6 link-local", "https://[fe80::1]/blob"},
		{"plain http to a remote host", "http://storage.example.test/blob"},
		{"another scheme", "ftp://storage.example.test/blob"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			var gets atomic.Int32
			reg := redirectingRegistry(t, tc.target, &gets)
			c := newClient(t, func(c *registry.Config) { c.RetryLimit = 3 })
			p := make([]byte, 10)
			err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "app"}, blob, 0, p)
			if !errors.Is(err, registry.ErrRefused) || registry.IsTransient(err) {
				t.Errorf("got %v, want a permanent ErrRefused", err)
			}
			if n := gets.Load(); n != 1 {
				t.Errorf("registry asked %d times, want 1 (a refusal is not retried)", n)
			}
			// Through the mirror's pass-through: a 502, and nothing of
			// the redirect's body.
			rec := httptest.NewRecorder()
			req := httptest.NewRequest(http.MethodGet, "/v2/app/blobs/"+blob.String(), nil)
			if _, err := c.Forward(testCtx(t), rec, req, registry.Ref{Registry: reg.URL, Repo: "app"}, "/v2/app/blobs/"+blob.String()); !errors.Is(err, registry.ErrRefused) {
				t.Errorf("Forward: got %v, want ErrRefused", err)
			}
			if rec.Code != http.StatusBadGateway || strings.Contains(rec.Body.String(), "SECRET") {
				t.Errorf("Forward: client got %d %q; want 502 without the redirect's body", rec.Code, rec.Body.String())
			}
		})
	}
}

// A redirect to loopback storage (as registries on one host do) is still
// followed.
func TestRedirectToLoopbackFollowed(t *testing.T) {
	t.Parallel()
	data := []byte("0123456789")
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.ServeContent(w, r, "b", time.Unix(1700000000, 0), strings.NewReader(string(data)))
	}))
	t.Cleanup(store.Close)
	var gets atomic.Int32
	reg := redirectingRegistry(t, store.URL+"/b", &gets)
	c := newClient(t, nil)
	p := make([]byte, 4)
	if err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "app"}, rafs.Digest{1}, 2, p); err != nil || string(p) != "2345" {
		t.Errorf("got %q, %v; want 2345", p, err)
	}
}

// A failed redirect to signed storage names the storage URL without its
// signature, in errors (which reach logs and clients).
func TestRedirectErrorsHideSignatures(t *testing.T) {
	t.Parallel()
	var gets atomic.Int32
	reg := redirectingRegistry(t, "http://storage.example.test/blob?X-Amz-Signature=SECRETSIG&X-Amz-Credential=AKIA", &gets)
	c := newClient(t, nil)
	err := c.ReadRange(testCtx(t), registry.Ref{Registry: reg.URL, Repo: "app"}, rafs.Digest{1}, 0, make([]byte, 4))
	if err == nil || strings.Contains(err.Error(), "SECRETSIG") || strings.Contains(err.Error(), "AKIA") {
		t.Errorf("got %v, want an error without the storage URL's query", err)
	}
}
