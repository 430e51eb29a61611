package cluster

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// helloSource is the program of the hello image: it reads the image's
// data file and prints its digest, so that its output proves both layers
// were unpacked whole.
const helloSource = `package main

import (
	"crypto/sha256"
	"fmt"
	"os"
)

func main() {
	b, err := os.ReadFile("/data/blob")
	if err != nil {
		fmt.Println("hello:", err)
		os.Exit(1)
	}
	fmt.Printf("hello from damselfly's containerd test: /data/blob sha256:%x\n", sha256.Sum256(b))
}
`

// helloDataSize is the size of the image's data file, random so that its
// layer does not compress: three pieces' worth of layer bytes.
const helloDataSize = 10 << 20

// helloImage is a small runnable image in the registry: a static Go
// program (layer 1) and a data file of random bytes (layer 2).
type helloImage struct {
	repo       string // "ctrd/hello"
	tag        string
	want       string // the line the program prints
	layerBytes int64  // the layers' compressed sizes, summed
	blobBytes  int64  // layerBytes and the config's size
}

// ref is the image's reference in the registry at host.
func (h *helloImage) ref(host string) string { return host + "/" + h.repo + ":" + h.tag }

// programImage is an OCI image of layers for this machine's
// architecture whose entrypoint is entry.
func programImage(t *testing.T, entry string, layers ...v1.Layer) v1.Image {
	t.Helper()
	img := mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON)
	img, err := mutate.AppendLayers(img, layers...)
	if err != nil {
		t.Fatal(err)
	}
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Config.Entrypoint = []string{entry}
	if img, err = mutate.ConfigFile(img, cf); err != nil {
		t.Fatal(err)
	}
	return img
}

// pushHello builds the hello image and pushes it to reg.
func pushHello(t *testing.T, reg *registry) *helloImage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	program := buildHello(ctx, t)
	data := make([]byte, helloDataSize)
	rand.NewChaCha8([32]byte{'c', 't', 'r', 'd'}).Read(data)

	img := programImage(t, "/hello",
		gzipLayer(t, tarEntry{name: "hello", mode: 0o755, body: program}),
		gzipLayer(t, tarEntry{name: "data/", mode: 0o755, dir: true}, tarEntry{name: "data/blob", mode: 0o644, body: data}))

	h := &helloImage{repo: "ctrd/hello", tag: "v1",
		want: fmt.Sprintf("hello from damselfly's containerd test: /data/blob sha256:%x", sha256.Sum256(data))}
	ref, err := name.ParseReference(h.ref(reg.host), name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		h.layerBytes += l.Size
	}
	h.blobBytes = h.layerBytes + m.Config.Size
	return h
}

// buildHello builds helloSource as a static linux binary and returns it.
func buildHello(ctx context.Context, t *testing.T) []byte {
	t.Helper()
	return buildProgram(ctx, t, helloSource)
}

// buildProgram builds the Go program source as a static linux binary and
// returns it.
func buildProgram(ctx context.Context, t *testing.T, source string) []byte {
	t.Helper()
	dir := t.TempDir()
	for file, body := range map[string]string{"go.mod": "module hello\n\ngo 1.26\n", "main.go": source} {
		if err := os.WriteFile(filepath.Join(dir, file), []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.CommandContext(ctx, "go", "build", "-o", "hello", ".")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOFLAGS=")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build the hello program: %v\n%s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(dir, "hello"))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

type tarEntry struct {
	name string
	mode int64
	dir  bool
	body []byte
}

// gzipLayer is a gzip-compressed tar layer of entries.
func gzipLayer(t *testing.T, entries ...tarEntry) v1.Layer {
	t.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	tw := tar.NewWriter(zw)
	mtime := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, e := range entries {
		hdr := &tar.Header{Name: e.name, Mode: e.mode, ModTime: mtime, Typeflag: tar.TypeReg, Size: int64(len(e.body))}
		if e.dir {
			hdr.Typeflag, hdr.Size = tar.TypeDir, 0
		}
		if err := tw.WriteHeader(hdr); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.body); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	gz := buf.Bytes()
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(gz)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		t.Fatal(err)
	}
	return l
}
