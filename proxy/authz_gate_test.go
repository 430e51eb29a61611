package proxy

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs/registry"
)

// fakeRegistry answers gate checks: per credentials, a status, or an
// outage (every check fails as unreachable).
type fakeRegistry struct {
	mu     sync.Mutex
	codes  map[string]int // Authorization -> status
	down   bool
	asked  atomic.Int32
	gateCh chan struct{} // if set, each check waits for a receive
}

func (f *fakeRegistry) Check(ctx context.Context, ref registry.Ref, kind, object string) (int, string, error) {
	f.asked.Add(1)
	if f.gateCh != nil {
		<-f.gateCh
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return 0, "", fmt.Errorf("check: %w", &registry.StatusError{Code: http.StatusServiceUnavailable})
	}
	if c, ok := f.codes[ref.Authorization]; ok {
		return c, "", nil
	}
	return http.StatusUnauthorized, `Basic realm="test"`, nil
}

func (f *fakeRegistry) setDown(down bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.down = down
}

// fakeClock is a settable clock.
type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

const (
	testBlob  = "sha256:1111111111111111111111111111111111111111111111111111111111111111"
	testBlob2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222"
)

func newTestGate(reg *fakeRegistry) (*gate, *fakeClock) {
	clk := &fakeClock{t: time.Unix(1_800_000_000, 0)}
	g := newGate(reg, time.Minute, time.Hour, []byte("0123456789abcdef0123456789abcdef"))
	g.now = clk.now
	return g, clk
}

func TestGateDecisions(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{codes: map[string]int{"Basic alice": 200, "Basic bob": 403}}
	g, clk := newTestGate(reg)
	ctx := t.Context()
	alice := registry.Ref{Registry: "https://r", Repo: "team/app", Authorization: "Basic alice"}
	bob := alice
	bob.Authorization = "Basic bob"
	anon := alice
	anon.Authorization = ""
	other := alice
	other.Repo = "team/other"

	type step struct {
		name      string
		ref       registry.Ref
		object    string
		grant     string
		advance   time.Duration
		down      bool
		allowed   bool
		how       string
		code      int
		wantAsked int32 // checks sent so far
	}
	aliceGrant := g.grantFor(alice, "blobs", testBlob)
	for _, s := range []step{
		{name: "first read asks", ref: alice, object: testBlob, allowed: true, how: "fresh", wantAsked: 1},
		{name: "within ttl: remembered", ref: alice, object: testBlob, advance: 30 * time.Second, allowed: true, how: "fresh", wantAsked: 1},
		{name: "other credentials ask again", ref: bob, object: testBlob, code: 403, how: "origin", wantAsked: 2},
		{name: "no credentials ask again", ref: anon, object: testBlob, code: 401, how: "origin", wantAsked: 3},
		{name: "other repository asks again", ref: other, object: testBlob, code: 200, allowed: true, how: "fresh", wantAsked: 4},
		{name: "other blob asks again", ref: alice, object: testBlob2, allowed: true, how: "fresh", wantAsked: 5},
		{name: "refusal kept 5s", ref: bob, object: testBlob, advance: 4 * time.Second, code: 403, how: "origin", wantAsked: 5},
		{name: "past ttl, outage: stale allows", ref: alice, object: testBlob, advance: 2 * time.Minute, down: true, allowed: true, how: "stale", wantAsked: 6},
		{name: "outage: never allowed is refused", ref: bob, object: testBlob, down: true, code: 403, how: "unreachable", wantAsked: 6},
		{name: "outage: no credentials refused", ref: anon, object: testBlob, down: true, code: 403, how: "unreachable", wantAsked: 6},
		{name: "outage past stale window: refused", ref: alice, object: testBlob, advance: 2 * time.Hour, down: true, code: 403, how: "unreachable", wantAsked: 7},
		{name: "outage past stale window, grant: allowed", ref: alice, object: testBlob, grant: aliceGrant, down: true, allowed: true, how: "grant", wantAsked: 7},
		{name: "grant for another blob: refused", ref: alice, object: testBlob2, grant: aliceGrant, down: true, code: 403, how: "unreachable", wantAsked: 7},
		{name: "grant with other credentials, outage: allowed (a grant is a capability)", ref: bob, object: testBlob, grant: aliceGrant, advance: 3 * time.Second, down: true, allowed: true, how: "grant", wantAsked: 8},
		{name: "forged grant: refused", ref: anon, object: testBlob, grant: aliceGrant[:len(aliceGrant)-2] + "AA", down: true, code: 403, how: "unreachable", wantAsked: 8},
		{name: "registry back: grant no longer counts", ref: bob, object: testBlob, grant: aliceGrant, advance: 3 * time.Second, code: 403, how: "origin", wantAsked: 9},
	} {
		clk.add(s.advance)
		reg.setDown(s.down)
		d := g.authorize(ctx, s.ref, "blobs", s.object, s.grant)
		if d.allowed != s.allowed || d.how != s.how || (!s.allowed && d.code != s.code) {
			t.Errorf("%s: got allowed=%v how=%s code=%d, want allowed=%v how=%s code=%d", s.name, d.allowed, d.how, d.code, s.allowed, s.how, s.code)
		}
		if got := reg.asked.Load(); got != s.wantAsked {
			t.Errorf("%s: registry asked %d times in all, want %d", s.name, got, s.wantAsked)
		}
	}
}

// A burst of requests for one verdict sends one check; a registry that
// failed is not asked again for downFor.
func TestGateAsksOnce(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{codes: map[string]int{"Basic alice": 200}, gateCh: make(chan struct{})}
	g, clk := newTestGate(reg)
	ref := registry.Ref{Registry: "https://r", Repo: "team/app", Authorization: "Basic alice"}
	var wg sync.WaitGroup
	var allowed atomic.Int32
	for range 20 {
		wg.Go(func() {
			if g.authorize(t.Context(), ref, "blobs", testBlob, "").allowed {
				allowed.Add(1)
			}
		})
	}
	// Let exactly one check through (the send waits for it); the other
	// requests must be waiting on it.
	reg.gateCh <- struct{}{}
	wg.Wait()
	if n := reg.asked.Load(); n != 1 {
		t.Errorf("20 concurrent requests sent %d checks, want 1", n)
	}
	if n := allowed.Load(); n != 20 {
		t.Errorf("%d of 20 allowed, want 20", n)
	}

	reg.gateCh = nil
	reg.setDown(true)
	other := ref
	other.Authorization = "Basic carol"
	for range 5 {
		if d := g.authorize(t.Context(), other, "blobs", testBlob, ""); d.allowed || d.code != http.StatusForbidden {
			t.Errorf("outage: got %+v, want a 403 refusal", d)
		}
	}
	if n := reg.asked.Load(); n != 2 {
		t.Errorf("5 requests during an outage sent %d checks in all, want 2 (the first failure marks the registry down)", n)
	}
	clk.add(downFor + time.Millisecond)
	g.authorize(t.Context(), other, "blobs", testBlob, "")
	if n := reg.asked.Load(); n != 3 {
		t.Errorf("after downFor: %d checks in all, want 3", n)
	}
}

func TestGrantKeyFile(t *testing.T) {
	t.Parallel()
	p := t.TempDir() + "/grant.key"
	k1, err := loadGrantKey(p)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := loadGrantKey(p)
	if err != nil {
		t.Fatal(err)
	}
	if string(k1) != string(k2) || len(k1) != grantKeySize {
		t.Errorf("key not kept across loads (%d, %d bytes)", len(k1), len(k2))
	}
	if err := os.Chmod(p, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := loadGrantKey(p); err == nil {
		t.Error("a key readable by others was accepted")
	}
	if k, err := loadGrantKey(""); err != nil || len(k) != grantKeySize {
		t.Errorf("no file: %d bytes, %v", len(k), err)
	}
}

// Clients name registries: however many fail, the gate's memory of them
// stays bounded.
func TestGateDownBounded(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{down: true}
	g, _ := newTestGate(reg)
	for i := range 3 * maxDown {
		g.authorize(t.Context(), registry.Ref{Registry: fmt.Sprintf("https://r%d", i), Repo: "a"}, "blobs", testBlob, "")
	}
	g.mu.Lock()
	n := len(g.down)
	g.mu.Unlock()
	if n > maxDown {
		t.Errorf("%d registries remembered as down, want at most %d", n, maxDown)
	}
}

// While the registry cannot be asked, a client it allowed in a
// repository may have the blobs a manifest held of that repository
// references, and anonymous clients a repository peers saw public.
func TestGateRepositoryWideThroughOutage(t *testing.T) {
	t.Parallel()
	reg := &fakeRegistry{codes: map[string]int{"Basic alice": 200, "": 200}}
	g, clk := newTestGate(reg)
	ctx := t.Context()
	alice := registry.Ref{Registry: "https://r", Repo: "team/app", Authorization: "Basic alice"}
	referenced := map[string]bool{testBlob: true}
	g.refs = func(r, repo, d string) bool { return r == alice.Registry && repo == alice.Repo && referenced[d] }
	var publicAsked []string
	publicAt := map[string]time.Time{}
	g.public = func(ctx context.Context, r, repo, object string) (time.Time, bool) {
		publicAsked = append(publicAsked, repo)
		at, ok := publicAt[repo]
		return at, ok
	}
	// Alice was given some manifest of the repository, nothing else.
	if d := g.authorize(ctx, alice, "manifests", "v1", ""); !d.allowed {
		t.Fatalf("registry up: %+v", d)
	}
	reg.setDown(true)
	clk.add(2 * time.Minute)
	if d := g.authorize(ctx, alice, "blobs", testBlob, ""); !d.allowed || d.how != "stale" {
		t.Errorf("outage, a blob the repository's manifest references: %+v, want allowed (stale)", d)
	}
	if d := g.authorize(ctx, alice, "blobs", testBlob2, ""); d.allowed {
		t.Errorf("outage, a blob no manifest of the repository references: %+v, want refused", d)
	}
	other := alice
	other.Repo = "team/other"
	if d := g.authorize(ctx, other, "blobs", testBlob, ""); d.allowed {
		t.Errorf("outage, the same blob in another repository: %+v, want refused", d)
	}
	if len(publicAsked) != 0 {
		t.Errorf("peers asked about public repositories for a client with credentials: %v", publicAsked)
	}

	anon := alice
	anon.Authorization = ""
	if d := g.authorize(ctx, anon, "blobs", testBlob, ""); d.allowed {
		t.Errorf("outage, anonymous, no peer saw the repository public: %+v, want refused", d)
	}
	publicAt[alice.Repo] = clk.now().Add(-30 * time.Minute)
	if d := g.authorize(ctx, anon, "blobs", testBlob, ""); !d.allowed || d.how != "public" {
		t.Errorf("outage, anonymous, peers saw it public 30m ago: %+v, want allowed (public)", d)
	}
	if d := g.authorize(ctx, anon, "blobs", testBlob2, ""); d.allowed {
		t.Errorf("outage, anonymous, public repository, unreferenced blob: %+v, want refused", d)
	}
	if at, ok := g.publicAt(alice.Registry, alice.Repo); !ok || !at.Equal(publicAt[alice.Repo]) {
		t.Errorf("publicAt after peers said so: %v %v, want %v", at, ok, publicAt[alice.Repo])
	}
	clk.add(time.Hour) // past AuthStale (1h) since the peers saw it
	if d := g.authorize(ctx, anon, "manifests", "v1", ""); d.allowed {
		t.Errorf("outage, anonymous, public longer ago than auth_stale: %+v, want refused", d)
	}
}
