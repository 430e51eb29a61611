package proxy_test

import (
	"bytes"
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/manifests"
	"damselfly/rafs/piece"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

// Outage modes of the test registry.
const (
	down503   = "503"   // it answers every request 503
	downReset = "reset" // it closes every connection unanswered
)

// setDown makes reg fail every request in mode ("" ends the outage).
func setDown(reg *registrytest.Registry, mode string) {
	switch mode {
	case "":
		reg.SetIntercept(nil)
	case down503:
		reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "down for maintenance", http.StatusServiceUnavailable)
			return true
		})
	case downReset:
		reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
			if c, _, err := w.(http.Hijacker).Hijack(); err == nil {
				c.Close()
			}
			return true
		})
	}
}

// testClock is a settable clock for the store's tag resolutions.
type testClock struct {
	mu     sync.Mutex
	offset time.Duration // added to the real time
}

func (c *testClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return time.Now().Add(c.offset)
}

func (c *testClock) set(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.offset = d
}

// manifestEnv is an env whose proxy keeps manifests in a store in dir.
func manifestEnv(t *testing.T, o envOptions) (*env, string, *testClock) {
	t.Helper()
	dir := t.TempDir()
	clk := &testClock{}
	st, err := manifests.Open(dir, manifests.Options{Now: clk.now})
	if err != nil {
		t.Fatal(err)
	}
	up := o.upCfg
	o.upCfg = func(c *registry.Config) {
		c.RetryLimit = 0 // outages answer at once
		if up != nil {
			up(c)
		}
	}
	o.opts = append(o.opts, proxy.WithManifests(st))
	return newEnv(t, o), dir, clk
}

func lastPull(t *testing.T, e *env) proxy.Pull {
	t.Helper()
	r := e.srv.Recent()
	if len(r) == 0 {
		t.Fatal("no pull recorded")
	}
	return r[0]
}

func storeMetric(t *testing.T, e *env, by string) float64 {
	t.Helper()
	mfs, err := e.prom.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "damselfly_proxy_manifests_from_store_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			if m.GetLabel()[0].GetValue() == by {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

func TestManifestsThroughOutage(t *testing.T) {
	t.Parallel()
	for _, mode := range []string{down503, downReset} {
		t.Run(mode, func(t *testing.T) {
			t.Parallel()
			e, _, _ := manifestEnv(t, envOptions{})
			manifest, digest, _ := e.reg.PushImage(t, "team/app", "v1")
			byTag, byDigest := "/v2/team/app/manifests/v1", "/v2/team/app/manifests/"+digest
			if code, _, body := e.do(t, http.MethodGet, byTag, nil); code != http.StatusOK || !bytes.Equal(body, manifest) {
				t.Fatalf("registry up, by tag: got %d, want 200 and the manifest", code)
			}
			if p := lastPull(t, e); p.Served != proxy.ServedOrigin {
				t.Errorf("registry up: served %q, want %q", p.Served, proxy.ServedOrigin)
			}
			_, upHdr, _ := e.do(t, http.MethodGet, byDigest, nil)

			setDown(e.reg, mode)
			// A repository this client was never given anything of: the
			// gate's refusal, whether or not the node holds anything.
			if code, _, body := e.do(t, http.MethodGet, "/v2/team/other/manifests/v1", nil); code != http.StatusForbidden || !strings.Contains(string(body), "could not be asked") {
				t.Errorf("outage, repository never allowed: got %d %s, want 403 saying the registry could not be asked", code, body)
			}
			// A tag of a repository it was given manifests of, that the
			// node never resolved: the origin's failure, as without a store.
			if code, _, body := e.do(t, http.MethodGet, "/v2/team/app/manifests/v9", nil); code < 500 {
				t.Errorf("outage, tag never resolved: got %d %s, want the origin's 5xx", code, body)
			}
			for _, tt := range []struct {
				path, method string
				stale        bool
			}{
				{byDigest, http.MethodGet, false},
				{byDigest, http.MethodHead, false},
				{byTag, http.MethodGet, true},
				{byTag, http.MethodHead, true},
			} {
				code, hdr, body := e.do(t, tt.method, tt.path, nil)
				if code != http.StatusOK {
					t.Errorf("outage, %s %s: got %d %s, want 200", tt.method, tt.path, code, body)
					continue
				}
				if tt.method == http.MethodGet && !bytes.Equal(body, manifest) {
					t.Errorf("outage, GET %s: got %q, want the manifest", tt.path, body)
				}
				if tt.method == http.MethodHead && len(body) != 0 {
					t.Errorf("outage, HEAD %s: got a body of %d bytes", tt.path, len(body))
				}
				for _, h := range []string{"Content-Type", "Docker-Content-Digest"} {
					if got, want := hdr.Get(h), upHdr.Get(h); got != want {
						t.Errorf("outage, %s %s: %s %q, want %q as the registry sent", tt.method, tt.path, h, got, want)
					}
				}
				if got := hdr.Get("Content-Length"); got != strconv.Itoa(len(manifest)) {
					t.Errorf("outage, %s %s: Content-Length %s, want %d", tt.method, tt.path, got, len(manifest))
				}
				stale := hdr.Get(proxy.HeaderStale)
				if _, err := time.ParseDuration(stale); (err == nil) != tt.stale {
					t.Errorf("outage, %s %s: %s %q, want one: %v", tt.method, tt.path, proxy.HeaderStale, stale, tt.stale)
				}
				want := proxy.ServedNode
				if tt.stale {
					want = proxy.ServedNodeStale
				}
				if p := lastPull(t, e); p.Served != want {
					t.Errorf("outage, %s %s: served %q, want %q", tt.method, tt.path, p.Served, want)
				}
			}
			if d, tg := storeMetric(t, e, "digest"), storeMetric(t, e, "tag"); d != 2 || tg != 2 {
				t.Errorf("manifests_from_store_total: digest %v, tag %v; want 2 and 2", d, tg)
			}
		})
	}
}

// While the registry answers, a tag is resolved there: a tag pushed
// anew is seen at once, and the outage then serves the new resolution.
func TestManifestTagPushedAnew(t *testing.T) {
	t.Parallel()
	e, _, _ := manifestEnv(t, envOptions{})
	first, _, _ := e.reg.PushImage(t, "app", "latest")
	if code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/latest", nil); code != http.StatusOK || !bytes.Equal(body, first) {
		t.Fatalf("first push: got %d", code)
	}
	second, _, _ := e.reg.PushImage(t, "app", "latest")
	if bytes.Equal(first, second) {
		t.Fatal("two random images have one manifest")
	}
	for _, method := range []string{http.MethodHead, http.MethodGet} {
		code, hdr, body := e.do(t, method, "/v2/app/manifests/latest", nil)
		if code != http.StatusOK || hdr.Get("Docker-Content-Digest") != manifests.Digest(second) ||
			(method == http.MethodGet && !bytes.Equal(body, second)) {
			t.Errorf("%s after the second push: got %d, digest %s; want the second manifest", method, code, hdr.Get("Docker-Content-Digest"))
		}
	}
	setDown(e.reg, down503)
	if code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/latest", nil); code != http.StatusOK || !bytes.Equal(body, second) {
		t.Errorf("outage: got %d %q, want the second manifest", code, body)
	}
}

// containerd resolves a tag by HEAD and GETs the digest: that too is
// enough for the tag to be served through an outage.
func TestManifestTagResolvedByHead(t *testing.T) {
	t.Parallel()
	e, _, _ := manifestEnv(t, envOptions{})
	manifest, digest, _ := e.reg.PushImage(t, "app", "v1")
	if code, hdr, _ := e.do(t, http.MethodHead, "/v2/app/manifests/v1", nil); code != http.StatusOK || hdr.Get("Docker-Content-Digest") != digest {
		t.Fatalf("HEAD by tag: got %d", code)
	}
	if code, _, _ := e.do(t, http.MethodGet, "/v2/app/manifests/"+digest, nil); code != http.StatusOK {
		t.Fatalf("GET by digest: got %d", code)
	}
	setDown(e.reg, down503)
	if code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil); code != http.StatusOK || !bytes.Equal(body, manifest) {
		t.Errorf("outage, by tag: got %d %q, want the manifest", code, body)
	}
}

func TestManifestStaleness(t *testing.T) {
	t.Parallel()
	e, _, clk := manifestEnv(t, envOptions{cfg: func(c *proxy.Config) { c.ManifestStale = 2 * time.Hour }})
	manifest, digest, _ := e.reg.PushImage(t, "app", "v1")
	clk.set(-3 * time.Hour) // the tag is resolved "3 hours ago"
	if code, _, _ := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil); code != http.StatusOK {
		t.Fatalf("registry up: got %d", code)
	}
	setDown(e.reg, down503)
	code, hdr, body := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil)
	if code != http.StatusServiceUnavailable || !strings.Contains(string(body), "manifest_stale") || bytes.Contains(body, manifest) {
		t.Errorf("outage, resolution older than manifest_stale: got %d %s, want 503 naming manifest_stale", code, body)
	}
	if hdr.Get(proxy.HeaderStale) != "" {
		t.Errorf("a refusal carries %s", proxy.HeaderStale)
	}
	if code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/"+digest, nil); code != http.StatusOK || !bytes.Equal(body, manifest) {
		t.Errorf("outage, by digest: got %d, want 200 (a digest does not go stale)", code)
	}

	setDown(e.reg, "")
	clk.set(-time.Hour)
	if code, _, _ := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil); code != http.StatusOK {
		t.Fatalf("registry up again: got %d", code)
	}
	setDown(e.reg, down503)
	code, hdr, body = e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil)
	age, err := time.ParseDuration(hdr.Get(proxy.HeaderStale))
	if code != http.StatusOK || !bytes.Equal(body, manifest) || err != nil || age < time.Hour || age > time.Hour+time.Minute {
		t.Errorf("outage, resolution 1h old: got %d, %s %q; want 200 and about 1h0m0s", code, proxy.HeaderStale, hdr.Get(proxy.HeaderStale))
	}
}

// A damaged store file is never served: the request gets the origin's
// failure and the file is gone.
func TestManifestCorruptStore(t *testing.T) {
	t.Parallel()
	e, dir, _ := manifestEnv(t, envOptions{})
	manifest, digest, _ := e.reg.PushImage(t, "app", "v1")
	if code, _, _ := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil); code != http.StatusOK {
		t.Fatalf("registry up: got %d", code)
	}
	files, err := filepath.Glob(filepath.Join(dir, "m", "*"))
	if err != nil || len(files) != 1 {
		t.Fatalf("store holds %d files (%v), want 1", len(files), err)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	b[len(b)-2] ^= 0x20 // a byte of the body
	if err := os.WriteFile(files[0], b, 0o600); err != nil {
		t.Fatal(err)
	}
	setDown(e.reg, down503)
	for _, path := range []string{"/v2/app/manifests/" + digest, "/v2/app/manifests/v1"} {
		code, _, body := e.do(t, http.MethodGet, path, nil)
		if code != http.StatusServiceUnavailable || bytes.Contains(body, manifest[:len(manifest)-3]) {
			t.Errorf("outage, %s from a damaged store: got %d %q, want the origin's 503", path, code, body)
		}
	}
	if _, err := os.Stat(files[0]); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the damaged file is still there: %v", err)
	}
}

// A private repository's manifest goes, during an outage, only to a
// client the registry allowed; others get the refusal and no byte.
func TestManifestOutageAuthorisation(t *testing.T) {
	t.Parallel()
	e, _, _ := manifestEnv(t, envOptions{auth: &registrytest.Auth{
		User: "alice", Pass: "pw", Anonymous: true,
		Allow: func(user, repo string) bool { return user != "" || strings.HasPrefix(repo, "public/") },
	}})
	manifest, digest, _ := e.reg.PushImage(t, "private/app", "v1")
	alice := map[string]string{"Authorization": e.reg.BasicAuth()}
	wrong := map[string]string{"Authorization": "Basic " + "YWxpY2U6d3Jvbmc="} // alice:wrong
	for _, path := range []string{"/v2/private/app/manifests/v1", "/v2/private/app/manifests/" + digest} {
		if code, _, body := e.do(t, http.MethodGet, path, alice); code != http.StatusOK || !bytes.Equal(body, manifest) {
			t.Fatalf("alice, registry up, %s: got %d", path, code)
		}
		// Refused by the registry while it is up.
		if code, _, body := e.do(t, http.MethodGet, path, nil); code == http.StatusOK || bytes.Contains(body, manifest) {
			t.Fatalf("anonymous, registry up, %s: got %d and the manifest", path, code)
		}
	}
	setDown(e.reg, down503)
	for _, path := range []string{"/v2/private/app/manifests/v1", "/v2/private/app/manifests/" + digest} {
		for _, c := range []struct {
			name string
			hdr  map[string]string
		}{{"anonymous", nil}, {"wrong password", wrong}, {"a token never seen", map[string]string{"Authorization": "Bearer stolen"}}} {
			for _, method := range []string{http.MethodGet, http.MethodHead} {
				code, hdr, body := e.do(t, method, path, c.hdr)
				if code != http.StatusForbidden || bytes.Contains(body, manifest) || hdr.Get("Docker-Content-Digest") != "" {
					t.Errorf("outage, %s, %s %s: got %d, digest %q, %d bytes; want 403 and nothing of the manifest", c.name, method, path, code, hdr.Get("Docker-Content-Digest"), len(body))
				}
				if p := lastPull(t, e); p.Served != proxy.ServedRefused {
					t.Errorf("outage, %s, %s %s: served %q, want %q", c.name, method, path, p.Served, proxy.ServedRefused)
				}
			}
		}
		if code, _, body := e.do(t, http.MethodGet, path, alice); code != http.StatusOK || !bytes.Equal(body, manifest) {
			t.Errorf("outage, alice, %s: got %d %s, want 200 and the manifest", path, code, body)
		}
	}
}

// blobTables is a BlobSource whose node holds verified tables of some
// blobs (their pieces are not needed for a HEAD).
type blobTables map[rafs.Digest]int64

func (b blobTables) PieceTable(_ context.Context, _ registry.Ref, blob rafs.Digest, _ bool) (*piece.Table, bool) {
	if n, ok := b[blob]; ok {
		return &piece.Table{Blob: blob, Size: n, PieceSize: piece.MinSize}, true
	}
	return nil, false
}

func (blobTables) SettleTable(rafs.Digest, *piece.Table, bool) {}

func (blobTables) ReadPieces(context.Context, registry.Ref, *piece.Table, int, int, func(int, rafs.Chunk, []byte) error) error {
	return errors.New("no pieces here")
}

func (blobTables) RecordBlob(registry.Ref, rafs.Digest) piece.Recorder { return discardRecorder{} }

type discardRecorder struct{}

func (discardRecorder) Write(p []byte) (int, error) { return len(p), nil }
func (discardRecorder) Finish(bool) error           { return nil }

func TestBlobHeadThroughOutage(t *testing.T) {
	t.Parallel()
	tables := blobTables{}
	e := newEnv(t, envOptions{
		auth:  &registrytest.Auth{User: "alice", Pass: "pw", Anonymous: true, Allow: func(user, _ string) bool { return user != "" }},
		upCfg: func(c *registry.Config) { c.RetryLimit = 0 },
		opts:  []proxy.Option{proxy.WithBlobs(tables)},
	})
	data := randBytes(3, 5000)
	blob := e.reg.PushBlob(t, "private/app", data)
	other := e.reg.PushBlob(t, "private/app", randBytes(4, 100))
	tables[blob] = int64(len(data))
	alice := map[string]string{"Authorization": e.reg.BasicAuth()}
	path := "/v2/private/app/blobs/" + blob.String()
	if code, hdr, _ := e.do(t, http.MethodHead, path, alice); code != http.StatusOK || hdr.Get("Content-Length") != strconv.Itoa(len(data)) {
		t.Fatalf("registry up: got %d, Content-Length %s", code, hdr.Get("Content-Length"))
	}
	if code, _, _ := e.do(t, http.MethodHead, "/v2/private/app/blobs/"+other.String(), alice); code != http.StatusOK {
		t.Fatalf("registry up, other blob: got %d", code)
	}
	setDown(e.reg, down503)
	code, hdr, body := e.do(t, http.MethodHead, path, alice)
	if code != http.StatusOK || hdr.Get("Content-Length") != strconv.Itoa(len(data)) || hdr.Get("Docker-Content-Digest") != blob.String() || len(body) != 0 {
		t.Errorf("outage, alice: got %d, Content-Length %s, digest %s; want 200, %d, %s", code, hdr.Get("Content-Length"), hdr.Get("Docker-Content-Digest"), len(data), blob)
	}
	if p := lastPull(t, e); p.Served != proxy.ServedNode {
		t.Errorf("outage, alice: served %q, want %q", p.Served, proxy.ServedNode)
	}
	if code, hdr, _ := e.do(t, http.MethodHead, path, nil); code != http.StatusForbidden || hdr.Get("Docker-Content-Digest") != "" {
		t.Errorf("outage, anonymous: got %d, digest %q; want 403 and nothing", code, hdr.Get("Docker-Content-Digest"))
	}
	// A blob the node cannot serve: the origin's failure, as before.
	if code, _, _ := e.do(t, http.MethodHead, "/v2/private/app/blobs/"+other.String(), alice); code != http.StatusServiceUnavailable {
		t.Errorf("outage, a blob without a table: got %d, want the origin's 503", code)
	}
}

// fakePeers answers from a store of its own, as other peers would.
type fakePeers struct {
	st     *manifests.Store
	public map[string]time.Time // repo -> when peers saw it public
	mu     sync.Mutex
	asked  []string
}

func (f *fakePeers) Public(ctx context.Context, registry, repo, object string) (time.Time, error) {
	f.note("public " + repo)
	at, ok := f.public[repo]
	if !ok {
		return at, errors.New("no peer saw it public")
	}
	return at, nil
}

func (f *fakePeers) note(what string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.asked = append(f.asked, what)
}

func (f *fakePeers) Manifest(ctx context.Context, registry, repo, digest string) (manifests.Manifest, error) {
	f.note(repo + "@" + digest)
	return f.st.Get(registry, repo, digest)
}

func (f *fakePeers) Tag(ctx context.Context, registry, repo, tag string) (manifests.Tag, error) {
	f.note(repo + ":" + tag)
	t, ok := f.st.Tag(registry, repo, tag)
	if !ok {
		return t, errors.New("no peer holds it")
	}
	return t, nil
}

// Through an outage, peers answer what the node lacks: the youngest
// resolution of a tag (here one the node never saw, pushed after its own
// resolution), and a manifest of a repository the client was given.
func TestManifestsFromPeersThroughOutage(t *testing.T) {
	t.Parallel()
	pst, err := manifests.Open(t.TempDir(), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	peers := &fakePeers{st: pst}
	e, _, clk := manifestEnv(t, envOptions{opts: []proxy.Option{proxy.WithManifestPeers(peers)}})
	first, _, _ := e.reg.PushImage(t, "app", "latest")
	clk.set(-30 * time.Minute) // this node resolves the tag "30 minutes ago"
	if code, _, _ := e.do(t, http.MethodGet, "/v2/app/manifests/latest", nil); code != http.StatusOK {
		t.Fatalf("registry up: got %d", code)
	}
	// Another node resolves the tag after a new push; this one does not.
	second, d2, _ := e.reg.PushImage(t, "app", "latest")
	third, d3, _ := e.reg.PushImage(t, "app", "v3")
	reg := e.reg.URL
	for _, m := range [][]byte{second, third} {
		if err := pst.Put(reg, "app", manifests.Manifest{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: manifests.Digest(m), Body: m}); err != nil {
			t.Fatal(err)
		}
	}
	resolved := time.Now().Add(-10 * time.Minute)
	if _, err := pst.KeepTag(manifests.Tag{Registry: reg, Repo: "app", Tag: "latest", Digest: d2, At: resolved}); err != nil {
		t.Fatal(err)
	}
	if len(peers.asked) != 0 {
		t.Fatalf("peers asked while the registry answers: %v", peers.asked)
	}

	setDown(e.reg, down503)
	code, hdr, body := e.do(t, http.MethodGet, "/v2/app/manifests/latest", nil)
	if code != http.StatusOK || !bytes.Equal(body, second) || bytes.Equal(body, first) {
		t.Fatalf("outage, by tag: got %d, want the peers' younger resolution", code)
	}
	if age, err := time.ParseDuration(hdr.Get(proxy.HeaderStale)); err != nil || age < 9*time.Minute || age > time.Hour {
		t.Errorf("outage, by tag: %s %q, want the peers' resolution's age (~10m)", proxy.HeaderStale, hdr.Get(proxy.HeaderStale))
	}
	if p := lastPull(t, e); p.Served != proxy.ServedPeers {
		t.Errorf("outage, by tag: served %q, want %q", p.Served, proxy.ServedPeers)
	}
	for _, d := range []string{d2, d3} {
		if code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/"+d, nil); code != http.StatusOK || manifests.Digest(body) != d {
			t.Errorf("outage, by digest %s held by peers: got %d", d, code)
		}
	}
	// A repository this client was never given anything of: refused
	// before any peer is asked.
	before := len(peers.asked)
	if code, _, _ := e.do(t, http.MethodGet, "/v2/secret/manifests/"+d2, nil); code != http.StatusForbidden {
		t.Errorf("outage, a repository never allowed: got %d, want 403", code)
	}
	for _, q := range peers.asked[before:] {
		if !strings.HasPrefix(q, "public ") {
			t.Errorf("peers asked %q for a refused client", q)
		}
	}
}

// A node the registry never allowed anyone through (a node added during
// the outage) serves anonymous clients a repository that peers saw the
// registry let anonymous clients pull from within AuthStale, and no one
// else.
func TestManifestsOfPublicRepositoryOnAFreshNode(t *testing.T) {
	t.Parallel()
	pst, err := manifests.Open(t.TempDir(), manifests.Options{})
	if err != nil {
		t.Fatal(err)
	}
	peers := &fakePeers{st: pst, public: map[string]time.Time{
		"app": time.Now().Add(-time.Minute), "old": time.Now().Add(-3 * time.Hour)}}
	e, _, _ := manifestEnv(t, envOptions{
		cfg:  func(c *proxy.Config) { c.AuthStale = 2 * time.Hour },
		opts: []proxy.Option{proxy.WithManifestPeers(peers)},
	})
	reg := e.reg.URL
	for _, repo := range []string{"app", "old", "private"} {
		m, d, _ := e.reg.PushImage(t, repo, "v1")
		if err := pst.Put(reg, repo, manifests.Manifest{Digest: d, Body: m}); err != nil {
			t.Fatal(err)
		}
		if err := pst.SetTag(reg, repo, "v1", d); err != nil {
			t.Fatal(err)
		}
	}
	setDown(e.reg, down503)
	if code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil); code != http.StatusOK {
		t.Errorf("anonymous, public repository: got %d %s, want 200", code, body)
	} else if p := lastPull(t, e); p.Served != proxy.ServedPeers {
		t.Errorf("anonymous, public repository: served %q, want %q", p.Served, proxy.ServedPeers)
	}
	for _, c := range []struct {
		what, path string
		hdr        map[string]string
	}{
		{"anonymous, seen public longer ago than auth_stale", "/v2/old/manifests/v1", nil},
		{"anonymous, never seen public", "/v2/private/manifests/v1", nil},
		{"with credentials", "/v2/app/manifests/v1", map[string]string{"Authorization": "Basic dTpw"}},
	} {
		if code, _, body := e.do(t, http.MethodGet, c.path, c.hdr); code != http.StatusForbidden {
			t.Errorf("%s: got %d %s, want 403", c.what, code, body)
		}
	}
}
