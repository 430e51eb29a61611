package proxy_test

import (
	"net/http"
	"path/filepath"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// TestChunksOverUnixSocket reads an image's chunks through the proxy's
// unix socket with the transport chunkapi.Endpoint builds.
func TestChunksOverUnixSocket(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "peer.sock")
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.UnixSocket = sock }})
	img := buildImage(t, e.reg, "rafs/unix")
	base, tr, err := chunkapi.Endpoint("unix://"+sock, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr.CloseIdleConnections()
	if base == e.url {
		t.Fatalf("the unix endpoint's base URL is the TCP one, %s", base)
	}
	cc := chunkapi.NewClient(base, &http.Client{Transport: tr})
	up := registry.Ref{Registry: e.reg.URL, Repo: "rafs/unix"}
	if n, err := readAll(t, cc, up, img, img.chunks); err != nil || n != len(img.chunks) {
		t.Fatalf("delivered %d of %d chunks, err %v", n, len(img.chunks), err)
	}
	// The same client with the socket gone fails to connect, so the
	// chunks above came through it.
	bad, tr2, err := chunkapi.Endpoint("unix://"+sock+".missing", nil)
	if err != nil {
		t.Fatal(err)
	}
	defer tr2.CloseIdleConnections()
	cc = chunkapi.NewClient(bad, &http.Client{Transport: tr2})
	if _, err := readAll(t, cc, up, img, img.chunks[:1]); err == nil {
		t.Error("a missing socket delivered chunks")
	}
}
