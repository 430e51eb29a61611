package main

import (
	"archive/tar"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"time"

	"damselfly/rafs/rafstest"
)

// filesPerDir is how many files each directory of a many-files image
// holds: 200,000 files make 2,000 directories.
const filesPerDir = 100

var filesMtime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

// filesImage is n small text files (64 B to 1 KiB) in n/100 directories
// spread over 20 top-level ones, in one layer: the metadata-heavy shape
// (a node_modules, a Python site-packages) that RSS and mount-ready time
// must not grow with.
func filesImage(n int) rafstest.Image {
	var l rafstest.Layer
	dirs := (n + filesPerDir - 1) / filesPerDir
	hdr := func(typ byte, name string, mode, size int64) tar.Header {
		return tar.Header{Typeflag: typ, Name: name, Mode: mode, Size: size, ModTime: filesMtime, Format: tar.FormatPAX}
	}
	for t := range min(20, dirs) {
		l = append(l, rafstest.Entry{Hdr: hdr(tar.TypeDir, fmt.Sprintf("t%02d/", t), 0o755, 0)})
	}
	for i := range n {
		d := i / filesPerDir
		dir := fmt.Sprintf("t%02d/d%05d/", d%20, d)
		if i%filesPerDir == 0 {
			l = append(l, rafstest.Entry{Hdr: hdr(tar.TypeDir, dir, 0o755, 0)})
		}
		seed := uint64(i)
		size := 64 + rand.New(rand.NewPCG(seed, 1)).Int64N(961)
		l = append(l, rafstest.Entry{
			Hdr:  hdr(tar.TypeReg, fmt.Sprintf("%sf%03d.txt", dir, i%filesPerDir), 0o644, size),
			Data: func(w io.Writer) error { _, err := w.Write(smallText(seed, size)); return err },
		})
	}
	return rafstest.Image{Name: "files", Layers: []rafstest.Layer{l}}
}

// smallText is size bytes of word-like text, the same for a seed.
func smallText(seed uint64, size int64) []byte {
	r := rand.New(rand.NewPCG(seed, 2))
	b := make([]byte, size)
	for i := range b {
		if r.IntN(6) == 0 {
			b[i] = ' '
		} else {
			b[i] = byte('a' + r.IntN(26))
		}
	}
	b[len(b)-1] = '\n'
	return b
}

// filesLayout makes sure cache/files-N/layout holds filesImage(n),
// tagged "files", and returns the layout's path.
func filesLayout(ctx context.Context, cache string, n int, logf func(string, ...any)) (string, error) {
	root := filepath.Join(cache, fmt.Sprintf("files-%d", n))
	dir := filepath.Join(root, "layout")
	stamp := filepath.Join(root, "stamp")
	want := fmt.Sprintf("files=%d per-dir=%d v1", n, filesPerDir)
	if old, err := os.ReadFile(stamp); err == nil && string(old) == want {
		return dir, nil
	}
	if err := os.RemoveAll(root); err != nil {
		return "", err
	}
	start := time.Now()
	if err := rafstest.WriteOCILayout(ctx, dir, filesImage(n)); err != nil {
		return "", err
	}
	logf("files-%d: image written in %.1fs", n, time.Since(start).Seconds())
	return dir, os.WriteFile(stamp, []byte(want), 0o644)
}
