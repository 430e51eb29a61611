package proxy_test

import (
	"context"
	"encoding/base64"
	"net"
	"net/http"
	"strings"
	"sync"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

// nodeCacheSource is a ChunkSource that keeps what it fetched by chunk
// digest alone, whoever asked, as a node cache does: without the gate in
// front of it, a client that names a digest gets the chunk.
type nodeCacheSource struct {
	inner *registrySource

	mu     sync.Mutex
	stored map[rafs.Digest][]byte
}

func (s *nodeCacheSource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	for i, c := range chunks {
		s.mu.Lock()
		b := s.stored[c.Digest]
		s.mu.Unlock()
		if b == nil {
			err := s.inner.ReadChunks(ctx, up, blob, chunks[i:i+1], func(_ int, _ rafs.Chunk, stored []byte) error {
				b = append([]byte(nil), stored...)
				return nil
			})
			if err != nil {
				return &chunkapi.ChunkError{Index: i, Err: err}
			}
			s.mu.Lock()
			s.stored[c.Digest] = b
			s.mu.Unlock()
		}
		if err := deliver(i, c, b); err != nil {
			return err
		}
	}
	return nil
}

// privateRegistry gives alice every repository and anonymous clients
// only public/*.
var privateRegistry = &registrytest.Auth{User: "alice", Pass: "pw", Anonymous: true, Allow: func(user, repo string) bool {
	return user == "alice" || strings.HasPrefix(repo, "public/")
}}

func TestBatchOnlyForClientsTheRegistryAllows(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{auth: privateRegistry, source: func(up *registry.Client) proxy.ChunkSource {
		return &nodeCacheSource{inner: &registrySource{up: up}, stored: map[rafs.Digest][]byte{}}
	}})
	img := buildImage(t, e.reg, "private/app")
	pub := buildImage(t, e.reg, "public/app") // the same content: same chunks
	cc := chunkapi.NewClient(e.url, nil)
	alice := registry.Ref{Registry: e.reg.URL, Repo: "private/app", Authorization: e.reg.BasicAuth()}
	if n, err := readAll(t, cc, alice, img, img.chunks); err != nil || n != len(img.chunks) {
		t.Fatalf("alice: delivered %d of %d, err %v", n, len(img.chunks), err)
	}
	wrong := "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:wrong"))
	for _, tc := range []struct {
		name string
		up   registry.Ref
		want string // in the error
	}{
		{"no credentials", registry.Ref{Registry: e.reg.URL, Repo: "private/app"}, "404"},
		{"wrong password", registry.Ref{Registry: e.reg.URL, Repo: "private/app", Authorization: wrong}, "401"},
		{"bogus token", registry.Ref{Registry: e.reg.URL, Repo: "private/app", Authorization: "Bearer forged"}, "401"},
		{"another repository", registry.Ref{Registry: e.reg.URL, Repo: "public/other"}, "404"},
	} {
		n, err := readAll(t, cc, tc.up, img, img.chunks)
		if n != 0 || err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: delivered %d chunks, err %v; want none and a refusal with %s", tc.name, n, err, tc.want)
		}
	}
	// The same chunks in a repository anonymous clients may read are
	// theirs: what they are allowed to read, not the cache, decides.
	anonPub := registry.Ref{Registry: e.reg.URL, Repo: "public/app"}
	if n, err := readAll(t, cc, anonPub, pub, pub.chunks); err != nil || n != len(pub.chunks) {
		t.Errorf("anonymous, public repository: delivered %d of %d, err %v", n, len(pub.chunks), err)
	}
	if got := promCounter(t, e, "damselfly_proxy_authorizations_total", "origin"); got < 4 {
		t.Errorf("authorizations refused by the origin: %v, want at least 4", got)
	}
}

// Without a verdict, a client is refused during an outage; with one it
// reads on, and a mount's grant outlives the verdict.
func TestBatchThroughAnOutage(t *testing.T) {
	t.Parallel()
	var down sync.Map // "down" -> true while the registry is out
	e := newEnv(t, envOptions{auth: privateRegistry,
		upCfg: func(c *registry.Config) { c.RetryLimit = 0 },
		cfg: func(c *proxy.Config) {
			c.AuthTTL = 1 // every request asks again
			c.AuthStale = 1
		},
		source: func(up *registry.Client) proxy.ChunkSource {
			return &nodeCacheSource{inner: &registrySource{up: up}, stored: map[rafs.Digest][]byte{}}
		}})
	e.reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if _, ok := down.Load("down"); ok {
			http.Error(w, "down", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	img := buildImage(t, e.reg, "private/app")
	mount := chunkapi.NewClient(e.url, nil) // keeps its grant
	alice := registry.Ref{Registry: e.reg.URL, Repo: "private/app", Authorization: e.reg.BasicAuth()}
	if n, err := readAll(t, mount, alice, img, img.chunks); err != nil || n != len(img.chunks) {
		t.Fatalf("before the outage: delivered %d of %d, err %v", n, len(img.chunks), err)
	}
	down.Store("down", true)
	if n, err := readAll(t, mount, alice, img, img.chunks); err != nil || n != len(img.chunks) {
		t.Errorf("the mount, during the outage, verdict gone stale: delivered %d of %d, err %v", n, len(img.chunks), err)
	}
	stranger := chunkapi.NewClient(e.url, nil)
	for _, up := range []registry.Ref{{Registry: e.reg.URL, Repo: "private/app"}, alice} {
		n, err := readAll(t, stranger, up, img, img.chunks)
		if ce := chunkErr(t, err); n != 0 || ce.Transient || !strings.Contains(err.Error(), "403") || !strings.Contains(err.Error(), "not authorised") {
			t.Errorf("a client with no grant (credentials: %v) during the outage: delivered %d, err %v; want a permanent 403 naming why", up.Authorization != "", n, err)
		}
	}
}

func TestVersionCheckRelaysChallenge(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{auth: &registrytest.Auth{User: "alice", Pass: "pw"}})
	code, hdr, _ := e.do(t, http.MethodGet, "/v2/", nil)
	if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer ") {
		t.Errorf("GET /v2/ without credentials: got %d, challenge %q; want the registry's 401 and challenge", code, hdr.Get("WWW-Authenticate"))
	}
	if code, _, _ := e.do(t, http.MethodGet, "/v2/", map[string]string{"Authorization": "Bearer " + registrytest.Token}); code != http.StatusOK {
		t.Errorf("GET /v2/ with a token: got %d, want 200", code)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	code, hdr, body := e.do(t, http.MethodGet, "/v2/", map[string]string{chunkapi.HeaderRegistry: "http://" + ln.Addr().String()})
	if code != http.StatusOK || hdr.Get("Docker-Distribution-API-Version") != "registry/2.0" || string(body) != "{}" {
		t.Errorf("GET /v2/ with the registry unreachable: got %d %q, want 200 {}", code, body)
	}
}

// promCounter reads one sample of a counter vector by its one label value.
func promCounter(t *testing.T, e *env, name, label string) float64 {
	t.Helper()
	mfs, err := e.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetValue() == label {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}
