package rafstest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// layerDigests returns the sha256 of every layer's uncompressed tar, by image.
func layerDigests(t *testing.T, imgs []Image) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	for _, img := range imgs {
		for i, l := range img.Layers {
			h := sha256.New()
			if err := WriteLayerTar(h, l); err != nil {
				t.Fatalf("%s layer %d: %v", img.Name, i, err)
			}
			out[img.Name] = append(out[img.Name], fmt.Sprintf("%x", h.Sum(nil)))
		}
	}
	return out
}

func TestCorpusDeterministic(t *testing.T) {
	t.Parallel()
	for _, cs := range []int{0, 64 << 10} {
		t.Run(fmt.Sprintf("chunk=%d", cs), func(t *testing.T) {
			t.Parallel()
			opts := CorpusOptions{ChunkSize: cs}
			a, b := layerDigests(t, Corpus(opts)), layerDigests(t, Corpus(opts))
			for name, da := range a {
				if db := b[name]; !slices.Equal(da, db) {
					t.Errorf("%s: layer digests got %v, then %v", name, da, db)
				}
			}
		})
	}
}

// TestWriteOCILayoutDeterministic writes the corpus twice and requires the
// two layouts to be byte-identical, blobs (so gzip output), configs,
// manifests and index included.
func TestWriteOCILayoutDeterministic(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	imgs := Corpus(CorpusOptions{ChunkSize: 64 << 10})
	for _, d := range []string{"a", "b"} {
		if err := WriteOCILayout(t.Context(), filepath.Join(dir, d), imgs...); err != nil {
			t.Fatalf("WriteOCILayout: %v", err)
		}
	}
	fa, fb := readTree(t, filepath.Join(dir, "a")), readTree(t, filepath.Join(dir, "b"))
	if len(fa) != len(fb) {
		t.Errorf("got %d files, then %d", len(fa), len(fb))
	}
	for name, sum := range fa {
		if fb[name] != sum {
			t.Errorf("%s differs between two writes", name)
		}
	}
	// oci-layout, index.json, 10 manifests, 10 configs and 18 distinct
	// layers out of 19, since base-v1 and base-v2 share their base layer.
	if got, want := len(fa), 2+10+10+18; got != want {
		t.Errorf("got %d files in the layout, want %d", got, want)
	}
}

// readTree returns the sha256 of every file under dir, by relative path.
func readTree(t *testing.T, dir string) map[string][32]byte {
	t.Helper()
	out := map[string][32]byte{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		b, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = sha256.Sum256(b)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func TestCorpusImages(t *testing.T) {
	t.Parallel()
	tests := []struct {
		opts  CorpusOptions
		names []string
	}{
		{CorpusOptions{}, []string{"whiteouts", "replace", "hardlinks", "symlinks", "names", "sizes", "meta", "devices", "base-v1", "base-v2"}},
		{CorpusOptions{Large: true}, []string{"whiteouts", "replace", "hardlinks", "symlinks", "names", "sizes", "meta", "devices", "base-v1", "base-v2", "large"}},
	}
	for _, tt := range tests {
		imgs := Corpus(tt.opts)
		var names []string
		for _, img := range imgs {
			names = append(names, img.Name)
			for i, l := range img.Layers {
				for _, e := range l {
					if strings.HasPrefix(e.Hdr.Name, "/") || slices.Contains(strings.Split(e.Hdr.Name, "/"), "..") {
						t.Errorf("%s layer %d: hostile name %q in the corpus", img.Name, i, e.Hdr.Name)
					}
				}
			}
		}
		if !slices.Equal(names, tt.names) {
			t.Errorf("Corpus(%+v) images got %v, want %v", tt.opts, names, tt.names)
		}
	}
}

func TestBaseImagesShareBaseLayer(t *testing.T) {
	t.Parallel()
	var v1, v2 Image
	for _, img := range Corpus(CorpusOptions{}) {
		switch img.Name {
		case "base-v1":
			v1 = img
		case "base-v2":
			v2 = img
		}
	}
	d := layerDigests(t, []Image{v1, {Name: "v2", Layers: v2.Layers}})
	if d["base-v1"][0] != d["v2"][0] {
		t.Errorf("base layers got %s and %s, want equal", d["base-v1"][0], d["v2"][0])
	}
	if d["base-v1"][1] == d["v2"][1] {
		t.Errorf("upper layers are equal, want v2 to differ")
	}
}

// TestWriteLayerTar reads written layers back and checks what the corpus
// relies on survives: long names, nanosecond mtimes, xattrs, big ids,
// device numbers and body sizes.
func TestWriteLayerTar(t *testing.T) {
	t.Parallel()
	for _, img := range Corpus(CorpusOptions{ChunkSize: 64 << 10}) {
		for i, l := range img.Layers {
			var buf bytes.Buffer
			if err := WriteLayerTar(&buf, l); err != nil {
				t.Fatalf("%s layer %d: %v", img.Name, i, err)
			}
			tr := tar.NewReader(&buf)
			for j, e := range l {
				h, err := tr.Next()
				if err != nil {
					t.Fatalf("%s layer %d entry %d: %v", img.Name, i, j, err)
				}
				n, err := io.Copy(io.Discard, tr)
				if err != nil {
					t.Fatalf("%s %s: read body: %v", img.Name, h.Name, err)
				}
				w := e.Hdr
				switch {
				case h.Name != w.Name:
					t.Errorf("%s: name got %q, want %q", img.Name, h.Name, w.Name)
				case !h.ModTime.Equal(w.ModTime):
					t.Errorf("%s %s: mtime got %v, want %v", img.Name, w.Name, h.ModTime, w.ModTime)
				case n != w.Size:
					t.Errorf("%s %s: body got %d bytes, want %d", img.Name, w.Name, n, w.Size)
				case h.Uid != w.Uid || h.Gid != w.Gid || h.Mode != w.Mode || h.Linkname != w.Linkname:
					t.Errorf("%s %s: header got %+v, want %+v", img.Name, w.Name, h, w)
				case h.Devmajor != w.Devmajor || h.Devminor != w.Devminor:
					t.Errorf("%s %s: device got %d:%d, want %d:%d", img.Name, w.Name, h.Devmajor, h.Devminor, w.Devmajor, w.Devminor)
				}
				for k, v := range w.PAXRecords {
					if v != "" && h.PAXRecords[k] != v {
						t.Errorf("%s %s: PAX record %s got %q, want %q", img.Name, w.Name, k, h.PAXRecords[k], v)
					}
				}
			}
			if _, err := tr.Next(); err != io.EOF {
				t.Errorf("%s layer %d: after the last entry got %v, want EOF", img.Name, i, err)
			}
		}
	}
}

func TestWriteLayerTarShortData(t *testing.T) {
	t.Parallel()
	e := text("f", 0o644, "12345")
	e.Hdr.Size = 10
	err := WriteLayerTar(io.Discard, Layer{e})
	if !errors.Is(err, errShortData) {
		t.Errorf("got %v, want errShortData", err)
	}
}

func TestHostileLayers(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name    string
		entry   string // name of the hostile entry
		readErr bool   // reading the layer back fails
	}{
		{"dotdot", "../escape", false},
		{"dotdot-nested", "ok/../../escape", false},
		{"absolute", "/etc/x", false},
		{"hardlink-missing", "link", false},
		{"hardlink-escape", "passwd", false},
		{"hardlink-dir", "l", false},
		{"symlink-escape", "evil/x", false},
		{"symlink-abs-escape", "abs/x", false},
		{"truncated", "huge", true},
	}
	layers := HostileLayers()
	if len(layers) != len(tests) {
		t.Errorf("got %d hostile layers, want %d", len(layers), len(tests))
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			l, ok := layers[tt.name]
			if !ok {
				t.Fatalf("no hostile layer %q", tt.name)
			}
			var buf bytes.Buffer
			if err := WriteLayerTar(&buf, l); err != nil {
				t.Fatalf("WriteLayerTar: %v", err)
			}
			tr := tar.NewReader(&buf)
			var seen bool
			var err error
			for {
				var h *tar.Header
				if h, err = tr.Next(); err != nil {
					break
				}
				seen = seen || h.Name == tt.entry
				if _, err = io.Copy(io.Discard, tr); err != nil {
					break
				}
			}
			if !seen {
				t.Errorf("entry %q not found in the layer", tt.entry)
			}
			if gotErr := err != io.EOF; gotErr != tt.readErr {
				t.Errorf("reading back: got error %v, want error: %v", err, tt.readErr)
			}
		})
	}
}

func TestImplicitDirs(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		layers []Layer
		want   []string
	}{
		{"none", []Layer{{dir("./", 0o755), dir("a", 0o755), text("a/f", 0o644, "")}}, nil},
		{"root", []Layer{{dir("a", 0o755)}}, []string{"."}},
		{"deep", []Layer{{dir(".", 0o755), text("./a/b/f", 0o644, "")}}, []string{"a", "a/b"}},
		{"later layer", []Layer{{dir("./", 0o755), text("a/f", 0o644, "")}, {dir("a", 0o755)}}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Image{Name: tt.name, Layers: tt.layers}.ImplicitDirs()
			if !slices.Equal(got, tt.want) {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}
