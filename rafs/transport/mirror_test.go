package transport

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakeMirror forwards every request to the registry its ?ns= names, as
// the peer's mirror does, and records what it was asked.
type fakeMirror struct {
	mu  sync.Mutex
	got []string
}

func (f *fakeMirror) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	ns := r.URL.Query().Get("ns")
	f.mu.Lock()
	f.got = append(f.got, r.Method+" "+r.URL.Path+" ns="+ns)
	f.mu.Unlock()
	if ns == "" {
		http.Error(w, "no ns", http.StatusBadRequest)
		return
	}
	httputil.NewSingleHostReverseProxy(&url.URL{Scheme: "http", Host: ns}).ServeHTTP(w, r)
}

func (f *fakeMirror) requests() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.got...)
}

func TestMirrorCarriesReadsAndFallsBack(t *testing.T) {
	t.Parallel()
	var direct sync.Mutex
	var directGot []string
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.Query().Get("ns") == "" {
				direct.Lock()
				directGot = append(directGot, r.Method+" "+r.URL.Path)
				direct.Unlock()
			}
			h.ServeHTTP(w, r)
		})
	})
	img := randomImage(t)
	ctx := context.Background()
	ref := "docker://" + host + "/team/app:v1"
	if err := WriteImage(ctx, mustParse(t, ref), img, Options{}); err != nil {
		t.Fatal(err)
	}
	layer, want := firstLayer(t, img)

	fm := &fakeMirror{}
	// Over TCP and over a unix socket, as the peer serves both.
	tcp := httptest.NewServer(fm)
	t.Cleanup(tcp.Close)
	sock := filepath.Join(t.TempDir(), "peer.sock")
	ln, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	us := &http.Server{Handler: fm}
	go us.Serve(ln)
	t.Cleanup(func() { us.Close() })

	for _, mirror := range []string{tcp.URL, "unix://" + sock} {
		direct.Lock()
		directGot = nil
		direct.Unlock()
		before := len(fm.requests())
		opts := Options{Mirror: mirror}
		got, err := ReadImage(ctx, mustParse(t, ref), opts)
		if err != nil {
			t.Fatalf("%s: %v", mirror, err)
		}
		if digest(t, got) != digest(t, img) {
			t.Fatalf("%s: read another image", mirror)
		}
		br, err := NewBlobReader(ctx, mustParse(t, ref), opts)
		if err != nil {
			t.Fatal(err)
		}
		rc, _, err := br.Blob(ctx, layer)
		if err != nil {
			t.Fatal(err)
		}
		b, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || string(b) != string(want) {
			t.Fatalf("%s: layer through the mirror: %v", mirror, err)
		}
		reqs := fm.requests()[before:]
		var manifests, blobs int
		for _, r := range reqs {
			if !strings.HasSuffix(r, "ns="+host) {
				t.Errorf("%s: mirror asked %q without naming the registry", mirror, r)
			}
			manifests += strings.Count(r, "/manifests/")
			blobs += strings.Count(r, "/blobs/")
		}
		if manifests == 0 || blobs == 0 {
			t.Errorf("%s: the mirror saw %d manifest and %d blob requests, want some of each: %v", mirror, manifests, blobs, reqs)
		}
		direct.Lock()
		if len(directGot) != 0 {
			t.Errorf("%s: the registry was asked directly: %v", mirror, directGot)
		}
		direct.Unlock()
	}

	// The peer is not running: reads go to the registry directly.
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close()
	for _, mirror := range []string{gone.URL, "unix://" + filepath.Join(t.TempDir(), "none.sock")} {
		got, err := ReadImage(ctx, mustParse(t, ref), Options{Mirror: mirror})
		if err != nil || digest(t, got) != digest(t, img) {
			t.Fatalf("%s down: %v", mirror, err)
		}
	}
	if _, err := ReadImage(ctx, mustParse(t, ref), Options{Mirror: gone.URL, MirrorOnly: true}); err == nil {
		t.Error("MirrorOnly: read from the registry with the mirror down")
	}
	// A malformed mirror is an error, not a silent bypass.
	if _, err := ReadImage(ctx, mustParse(t, ref), Options{Mirror: "unix://relative"}); err == nil {
		t.Error("a malformed mirror was ignored")
	}
}
