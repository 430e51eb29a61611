package registry_test

import (
	"bytes"
	"net/http"
	"testing"

	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

// A registry whose API version check is open but whose repository wants
// a bearer token: Basic credentials are traded for one on the
// repository's challenge, the token is kept for the next reads, and
// credentials the token server refuses get the registry's own 401 with
// its challenge.
func TestTokenBehindOpenVersionCheck(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, &registrytest.Auth{User: "alice", Pass: "s3cret"})
	data := randBytes(7, 400)
	d := reg.PushBlob(t, "team/app", data)
	reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if r.URL.Path == "/v2/" {
			w.WriteHeader(http.StatusOK) // open, as some registries are
			return true
		}
		return false
	})
	c := newClient(t, nil)
	ctx := testCtx(t)
	ref := registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: reg.BasicAuth()}
	before := reg.TokenFetches.Load()
	for i := range 3 {
		p := make([]byte, 100)
		if err := c.ReadRange(ctx, ref, d, int64(i*100), p); err != nil {
			t.Fatalf("read %d: %v", i, err)
		}
		if !bytes.Equal(p, data[i*100:i*100+100]) {
			t.Fatalf("read %d: bytes differ", i)
		}
	}
	if got := reg.TokenFetches.Load() - before; got != 1 {
		t.Errorf("token fetches for 3 reads: got %d, want 1 (kept)", got)
	}
	if got := c.Authorization(ref); got != "Bearer "+registrytest.Token {
		t.Errorf("Authorization: got %q, want the token", got)
	}

	code, challenge, err := c.Check(ctx, registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: "Basic d3Jvbmc6d3Jvbmc="}, "blobs", d.String())
	if err != nil || code != http.StatusUnauthorized || challenge == "" {
		t.Errorf("wrong password: got %d %q %v, want the registry's 401 and its challenge", code, challenge, err)
	}
}
