package fusemount

import (
	"bytes"
	"context"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// copyToRegistry pushes the layout image tag to host as corpus/NAME:rafs.
func copyToRegistry(t *testing.T, layout, tag, host string) string {
	t.Helper()
	ctx := context.Background()
	src, err := transport.Parse("oci:"+layout+":"+tag, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := transport.ReadImage(ctx, src, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref := "docker://" + host + "/corpus/" + strings.TrimSuffix(tag, "-rafs") + ":rafs"
	dst, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.WriteImage(ctx, dst, img, transport.Options{}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// TestMountFromRealRegistryEqualsUmoci mounts every corpus image from a
// real distribution registry (the docker-registry package).
func TestMountFromRealRegistryEqualsUmoci(t *testing.T) {
	requireFUSE(t)
	rafstest.RequireTool(t, "umoci")
	host := rafstest.StartRegistry(t)
	layout, imgs := corpusLayout(t)
	for _, img := range imgs {
		t.Run(img.Name, func(t *testing.T) {
			ref := copyToRegistry(t, layout, img.Name+"-rafs", host)
			want, err := rafstest.UmociUnpack(context.Background(), layout, img.Name, filepath.Join(t.TempDir(), "umoci"))
			if err != nil {
				t.Fatal(err)
			}
			mp, d, _ := mountT(t, Options{Image: ref, Config: testConfig(t)})
			if diff := rafstest.CompareTreesWith(want, mp, rafstest.CompareOptions{IgnoreMtime: img.ImplicitDirs()}); len(diff) > 0 {
				t.Errorf("mounted image differs from umoci unpack (want=umoci, got=mount):\n%s", strings.Join(diff, "\n"))
			}
			if st := d.Status(mp); st.Errors != 0 {
				t.Errorf("read errors: got %d, want 0", st.Errors)
			}
		})
	}
}

// readEverything compares every regular file under mp with the local
// copy of the image.
func readEverything(t *testing.T, mp, localRef string) {
	t.Helper()
	img, err := image.Open(context.Background(), localRef, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	fsys := img.FS(context.Background())
	n := 0
	err = fs.WalkDir(fsys, ".", func(p string, e fs.DirEntry, err error) error {
		if err != nil || !e.Type().IsRegular() {
			return err
		}
		want, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		got, err := os.ReadFile(filepath.Join(mp, p))
		if err != nil {
			return err
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: bytes differ", p)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Fatal("no files read")
	}
}

// TestProxyChain: with the proxy pointed at nothing, reads fall back to
// the registry; pointed at a plain registry (standing in for the peer's
// mirror endpoint), they go through it.
func TestProxyChain(t *testing.T) {
	requireFUSE(t)
	host := rafstest.StartRegistry(t)
	layout, _ := corpusLayout(t)
	ref := copyToRegistry(t, layout, "sizes-rafs", host)
	local := "oci:" + layout + ":sizes-rafs"

	t.Run("proxy down, fallback", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Prefetch.Enable = false
		cfg.Backend.Proxy.URL = "http://127.0.0.1:1" // nothing listens on port 1
		cfg.Backend.Proxy.Fallback = true
		mp, d, _ := mountT(t, Options{Image: ref, Config: cfg})
		readEverything(t, mp, local)
		st := d.Status(mp)
		if st.Backend[SourceRegistry] == 0 || st.Backend[SourceProxy] != 0 {
			t.Errorf("backend bytes: got %v, want all from the registry", st.Backend)
		}
	})
	t.Run("proxy up", func(t *testing.T) {
		cfg := testConfig(t)
		cfg.Prefetch.Enable = false
		cfg.Backend.Proxy.URL = "http://" + host
		cfg.Backend.Proxy.PingURL = "http://" + host + "/v2/"
		mp, d, _ := mountT(t, Options{Image: ref, Config: cfg})
		readEverything(t, mp, local)
		st := d.Status(mp)
		if st.Backend[SourceProxy] == 0 || st.Backend[SourceRegistry] != 0 {
			t.Errorf("backend bytes: got %v, want all through the proxy", st.Backend)
		}
	})
}

// TestCacheDiskFull: with the node cache on a filesystem too small for
// the image, reads are served from memory and nothing fails.
func TestCacheDiskFull(t *testing.T) {
	requireFUSE(t)
	layout, _ := corpusLayout(t)
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size=256k", "tmpfs", dir).CombinedOutput(); err != nil {
		t.Fatalf("mount tmpfs: %v: %s", err, out)
	}
	t.Cleanup(func() { exec.Command("umount", "-l", dir).Run() })
	cfg := testConfig(t)
	cfg.Cache.Dir = dir
	cfg.MemoryBytes = 1 << 20
	cfg.Prefetch.Enable = false
	mp, d, _ := mountT(t, Options{Image: "oci:" + layout + ":sizes-rafs", Config: cfg})
	readEverything(t, mp, "oci:"+layout+":sizes-rafs")
	st := d.Status(mp)
	if st.Errors != 0 {
		t.Errorf("read errors: got %d, want 0", st.Errors)
	}
	if st.Cache == nil || st.Cache.Errors == 0 {
		t.Errorf("cache errors: got %+v, want the full disk to have been hit", st.Cache)
	}
}
