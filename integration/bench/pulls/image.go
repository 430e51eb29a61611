package main

import (
	"archive/tar"
	"compress/gzip"
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/integration/bench"
	"damselfly/integration/harness"
	"damselfly/rafs/rafstest"
)

// Destinations of skopeo copy (-dest).
const (
	destOCI = "oci" // an OCI layout (oci:DIR:TAG)
	destDir = "dir" // skopeo's dir: format (dir:DIR)
)

// pullImage is the plain (gzip, non-RAFS) OCI image every node pulls, as
// pushed to the origin: the Debian image's layers and extra layers of
// incompressible bytes to bring it to the size of a real application
// image.
type pullImage struct {
	Source string `json:"source"` // how it was made
	Repo   string `json:"repo"`   // bench/pull, tag Tag
	Tag    string `json:"tag"`
	// Layers are the layers' digests and compressed sizes; Bytes is
	// what a pull must receive: the layers, the config and the manifest.
	Layers []blobRef `json:"layers"`
	Bytes  int64     `json:"bytes"`
}

type blobRef struct {
	Digest string `json:"digest"`
	Size   int64  `json:"size"`
}

// prepareImage makes (or reuses) the pull image's OCI layout under
// OUT/pulls/layout and pushes it with skopeo into registry storage at
// regDir, through a loopback registry stopped again before it returns.
func (b *rig) prepareImage(ctx context.Context, regDir string) (*pullImage, error) {
	pi := &pullImage{Repo: "bench/pull", Tag: fmt.Sprintf("debian-plus-%dx%dm", b.o.extraLayers, b.o.extraMiB)}
	b.logf("preparing the Debian image (the first run downloads packages into %s)", filepath.Join(b.o.out, "debian"))
	deb, err := bench.DebianLayout(ctx, b.o.out, logWriter{b})
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(b.o.out, "pulls", "layout")
	if !hasTag(dir, pi.Tag) {
		start := time.Now()
		if err := writeImage(deb, bench.DebianImages[0].Tag, dir, pi.Tag, b.o.extraLayers, int64(b.o.extraMiB)<<20); err != nil {
			return nil, fmt.Errorf("pull image: %w", err)
		}
		b.logf("pull image %s written in %.1fs", pi.Tag, time.Since(start).Seconds())
	}
	pi.Source = fmt.Sprintf("the Debian image %s (`bench.DebianImages`, %d gzip layers) and %d gzip layers of %d MiB of pseudo-random bytes each, "+
		"as an OCI layout pushed with skopeo", bench.DebianImages[0].Tag, len(bench.DebianImages[0].Layers), b.o.extraLayers, b.o.extraMiB)
	p, err := layout.FromPath(dir)
	if err != nil {
		return nil, err
	}
	img, err := bench.LayoutImage(p, pi.Tag)
	if err != nil {
		return nil, err
	}
	m, err := img.Manifest()
	if err != nil {
		return nil, err
	}
	if pi.Bytes, err = bench.ImageBytes(img); err != nil {
		return nil, err
	}
	for _, l := range m.Layers {
		pi.Layers = append(pi.Layers, blobRef{Digest: l.Digest.String(), Size: l.Size})
	}

	reg, err := harness.StartRegistry(ctx, harness.RegistryConfig{Dir: regDir, LogDir: b.logs, OwnGroup: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := reg.Stop(); serr != nil {
			b.logf("loopback registry: %v", serr)
		}
	}()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Minute)
	defer cancel()
	dst := "docker://" + reg.Host() + "/" + pi.Repo + ":" + pi.Tag
	out, err := exec.CommandContext(cctx, "skopeo", "copy", "--insecure-policy", "--dest-tls-verify=false",
		"oci:"+dir+":"+pi.Tag, dst).CombinedOutput()
	if err != nil {
		return nil, fmt.Errorf("skopeo copy to %s: %w: %s", dst, err, out)
	}
	b.logf("pull image: %d layers, %s in all", len(pi.Layers), mib(pi.Bytes))
	return pi, nil
}

// hasTag reports whether the OCI layout at dir holds an image tagged tag.
func hasTag(dir, tag string) bool {
	p, err := layout.FromPath(dir)
	if err != nil {
		return false
	}
	_, err = bench.LayoutImage(p, tag)
	return err == nil
}

// writeImage writes the image tagged baseTag in the layout at baseDir,
// with extra layers of size bytes of pseudo-random content appended,
// into the layout at dir under tag.
func writeImage(baseDir, baseTag, dir, tag string, extra int, size int64) error {
	bp, err := layout.FromPath(baseDir)
	if err != nil {
		return err
	}
	img, err := bench.LayoutImage(bp, baseTag)
	if err != nil {
		return err
	}
	for i := range extra {
		l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return randomTar(uint64(i), size), nil },
			tarball.WithCompressionLevel(gzip.BestSpeed), tarball.WithMediaType(types.OCILayer))
		if err != nil {
			return err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return err
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	p, err := layout.Write(dir, empty.Index)
	if err != nil {
		return err
	}
	return p.AppendImage(img, layout.WithAnnotations(map[string]string{rafstest.RefNameAnnotation: tag}))
}

// randomTar is a tar holding one file, random/N.bin, of size bytes from
// a ChaCha8 stream seeded with n: incompressible, and the same on every
// call.
func randomTar(n uint64, size int64) io.ReadCloser {
	pr, pw := io.Pipe()
	go func() {
		var seed [32]byte
		binary.LittleEndian.PutUint64(seed[:], n+1)
		rng := rand.NewChaCha8(seed)
		tw := tar.NewWriter(pw)
		err := tw.WriteHeader(&tar.Header{Name: fmt.Sprintf("random/%d.bin", n), Mode: 0o644, Size: size,
			ModTime: time.Date(2025, time.May, 20, 0, 0, 0, 0, time.UTC), Typeflag: tar.TypeReg})
		if err == nil {
			_, err = io.CopyN(tw, rng, size)
		}
		if err == nil {
			err = tw.Close()
		}
		pw.CloseWithError(err)
	}()
	return pr
}

// checkPull verifies what skopeo left in its destination dir (an OCI
// layout for destOCI, else a dir: directory): every layer of pi, by
// name (the digest's hex) and size. skopeo has checked every blob's
// digest as it wrote it.
func checkPull(dir, dest string, pi *pullImage) error {
	if dest == destOCI {
		dir = filepath.Join(dir, "blobs", "sha256")
	}
	for _, l := range pi.Layers {
		hex := l.Digest[strings.IndexByte(l.Digest, ':')+1:]
		fi, err := os.Stat(filepath.Join(dir, hex))
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Digest, err)
		}
		if fi.Size() != l.Size {
			return fmt.Errorf("layer %s: got %d bytes, want %d", l.Digest, fi.Size(), l.Size)
		}
	}
	return nil
}

// mib formats bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// logWriter passes the image builder's progress through logf.
type logWriter struct{ b *rig }

func (w logWriter) Write(p []byte) (int, error) {
	w.b.logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
