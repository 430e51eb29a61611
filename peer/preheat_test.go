package peer

import (
	"archive/tar"
	"bytes"
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"damselfly/rafs"
)

// buildPrefetchImage builds a bootstrap of three files whose prefetch
// table names /b, which shares nothing with the others.
func buildPrefetchImage(t *testing.T) *rafs.Bootstrap {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for i, f := range []struct {
		name string
		size int
	}{{"a", 3 * rafs.MinChunkSize}, {"b", 2*rafs.MinChunkSize + 1}, {"c", rafs.MinChunkSize}} {
		data := randBytes(uint64(i+10), f.size)
		if err := tw.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)), ModTime: time.Unix(1700000000, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	layer := rafs.LayerSource{Name: "l", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}
	res, err := rafs.Build(t.Context(), []rafs.LayerSource{layer}, rafs.BuildOptions{ChunkSize: rafs.MinChunkSize, BlobDir: t.TempDir(), Prefetch: []string{"/b"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestPreheatChunks(t *testing.T) {
	t.Parallel()
	b := buildPrefetchImage(t)
	count := func(bs []preheatBlob) int {
		n := 0
		for _, pb := range bs {
			n += len(pb.chunks)
			for i := 1; i < len(pb.chunks); i++ {
				if pb.chunks[i].Ordinal <= pb.chunks[i-1].Ordinal {
					t.Errorf("blob %s: ordinals not ascending", pb.digest)
				}
			}
		}
		return n
	}
	all, err := preheatChunks(b, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := count(all), int(b.ChunkCount()); got != want {
		t.Errorf("all: got %d chunks, want %d", got, want)
	}
	pre, err := preheatChunks(b, true)
	if err != nil {
		t.Fatal(err)
	}
	if got := count(pre); got != 3 {
		t.Errorf("prefetch only: got %d chunks, want 3 (those of /b)", got)
	}
}

func TestPreheatConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultPreheat().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	c := DefaultPreheat()
	c.Schedulers = []string{"/ip4/127.0.0.1/tcp/1"}
	c.BatchChunks = 0
	c.Parallel = 100
	c.MaxJobs = 0
	c.ProgressInterval = 0
	c.OpenTimeout = -1
	c.MaxBootstrapSize = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{"schedulers[0]", "batch_chunks", "parallel", "max_jobs", "progress_interval", "open_timeout", "max_bootstrap_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}

func TestFileKeychain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	// "dXNlcjpwYXNz" is base64 of user:pass.
	if err := os.WriteFile(p, []byte(`{"auths": {"reg.example:5000": {"auth": "dXNlcjpwYXNz"}, "https://index.docker.io/v1/": {"username": "hub", "password": "pw"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	resolve := func(k fileKeychain, reg string) *authn.AuthConfig {
		t.Helper()
		r, err := name.NewRegistry(reg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := k.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	k := fileKeychain{path: p}
	if got := resolve(k, "reg.example:5000"); got.Username != "user" || got.Password != "pass" {
		t.Errorf("reg.example:5000: got %+v, want user:pass", got)
	}
	if got := resolve(k, "docker.io"); got.Username != "hub" {
		t.Errorf("docker.io: got %+v, want hub", got)
	}
	if got := resolve(k, "other.example"); *got != (authn.AuthConfig{}) {
		t.Errorf("other.example: got %+v, want anonymous", got)
	}
	if got := resolve(fileKeychain{path: filepath.Join(dir, "missing.json")}, "reg.example:5000"); *got != (authn.AuthConfig{}) {
		t.Errorf("missing file: got %+v, want anonymous", got)
	}
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ := name.NewRegistry("reg.example:5000")
	if _, err := k.Resolve(r); err == nil {
		t.Error("a corrupt docker config resolved")
	}
}

func TestPreheatRefusesLocalImages(t *testing.T) {
	t.Parallel()
	p := &Preheater{cfg: DefaultPreheat()}
	for _, ref := range []string{"oci:/etc:x", "/etc/passwd", "docker-archive:/tmp/x.tar"} {
		if _, _, err := p.openPreheat(t.Context(), ref, nil); err == nil || !strings.Contains(err.Error(), "only docker://") {
			t.Errorf("%s: got %v, want a refusal", ref, err)
		}
	}
}
