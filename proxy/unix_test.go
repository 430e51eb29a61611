package proxy_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs/registry"
)

func TestSocketPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		path    string
		isUnix  bool
		wantErr bool
	}{
		{"http://127.0.0.1:7950", "", false, false},
		{"https://peer.local", "", false, false},
		{"unix:///run/damselfly/peer.sock", "/run/damselfly/peer.sock", true, false},
		{"unix:/run/damselfly/peer.sock", "/run/damselfly/peer.sock", true, false},
		{"unix://host/run/peer.sock", "", true, true},
		{"unix:relative.sock", "", true, true},
		{"unix:///run/peer.sock?x=1", "", true, true},
		{"unix:///run/peer.sock#f", "", true, true},
		{"unix://", "", true, true},
	} {
		path, isUnix, err := proxy.SocketPath(tc.in)
		if path != tc.path || isUnix != tc.isUnix || (err != nil) != tc.wantErr {
			t.Errorf("SocketPath(%q) = %q, %v, %v; want %q, %v, error %v", tc.in, path, isUnix, err, tc.path, tc.isUnix, tc.wantErr)
		}
	}
}

// TestChunksOverUnixSocket reads an image's chunks through the proxy's
// unix socket with the transport Endpoint builds.
func TestChunksOverUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "peer.sock")
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.UnixSocket = sock }})
	img := buildImage(t, e.reg, "rafs/unix")
	base, tr, err := proxy.Endpoint("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	if base == e.url {
		t.Fatalf("the unix endpoint's base URL is the TCP one, %s", base)
	}
	cc := proxy.NewChunkClient(base, &http.Client{Transport: tr})
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/unix"}
	if n, err := readAll(t, cc, up, img, img.chunks); err != nil || n != len(img.chunks) {
		t.Fatalf("delivered %d of %d chunks, err %v", n, len(img.chunks), err)
	}
	// The same client with the socket gone fails to connect, so the
	// chunks above came through it.
	bad, tr2, err := proxy.Endpoint("unix://"+sock+".missing", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.CloseIdleConnections()
	cc = proxy.NewChunkClient(bad, &http.Client{Transport: tr2})
	if _, err := readAll(t, cc, up, img, img.chunks[:1]); err == nil {
		t.Error("a missing socket delivered chunks")
	}
}
