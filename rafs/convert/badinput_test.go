package convert_test

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	"github.com/klauspost/compress/zstd"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// smallLayer is a valid layer of a directory and three files.
func smallLayer() rafstest.Layer {
	l := rafstest.Layer{{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: "d/", Mode: 0o755}}}
	for i := range 3 {
		body := bytes.Repeat([]byte("content "+strconv.Itoa(i)+"\n"), 1000*(i+1))
		l = append(l, rafstest.Entry{
			Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: "d/f" + strconv.Itoa(i), Mode: 0o644, Size: int64(len(body))},
			Data: func(w io.Writer) error { _, err := w.Write(body); return err },
		})
	}
	return l
}

func layerTar(t *testing.T, l rafstest.Layer) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := rafstest.WriteLayerTar(&b, l); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func gzipped(t *testing.T, data []byte) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write(data); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

func zstdCompressed(t *testing.T, data []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(data, nil)
}

// writeBlobImage writes an image of one layer holding exactly blob (digest
// and all, so only the content can be wrong) as oci:layout:src.
func writeBlobImage(t *testing.T, layout string, blob []byte, mt types.MediaType) string {
	t.Helper()
	base, err := mutate.ConfigFile(mutate.ConfigMediaType(mutate.MediaType(empty.Image, types.OCIManifestSchema1), types.OCIConfigJSON),
		&v1.ConfigFile{OS: "linux", Architecture: "amd64", RootFS: v1.RootFS{Type: "layers"}})
	if err != nil {
		t.Fatal(err)
	}
	img, err := mutate.Append(base, mutate.Addendum{Layer: static.NewLayer(blob, mt), MediaType: mt})
	if err != nil {
		t.Fatal(err)
	}
	ref := "oci:" + layout + ":src"
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.WriteImage(t.Context(), r, img, transport.Options{}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// layerBlobPath returns the file of layer i of the image ref in layout.
func layerBlobPath(t *testing.T, layout, ref string, i int) string {
	t.Helper()
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := transport.ReadImage(t.Context(), r, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	d, err := ls[i].Digest()
	if err != nil {
		t.Fatal(err)
	}
	return filepath.Join(layout, "blobs", d.Algorithm, d.Hex)
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestConvertBadInput: every malformed source fails the conversion with an
// error naming the layer (and the entry, where there is one), and leaves
// neither the destination tag nor temporary files behind.
func TestConvertBadInput(t *testing.T) {
	t.Parallel()
	type setup func(t *testing.T, layout string) (src string)
	// corpusBlob writes a corpus image and damages its first layer's blob
	// file in place, so the bytes no longer match the digest.
	corpusBlob := func(damage func(t *testing.T, path string)) setup {
		return func(t *testing.T, layout string) string {
			imgs := rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: testChunk})
			var img rafstest.Image
			for _, i := range imgs {
				if i.Name == "sizes" {
					img = i
				}
			}
			img.Name = "src"
			if err := rafstest.WriteOCILayout(t.Context(), layout, img); err != nil {
				t.Fatal(err)
			}
			src := "oci:" + layout + ":src"
			damage(t, layerBlobPath(t, layout, src, 0))
			return src
		}
	}
	// blob writes an image whose one layer is exactly make's bytes.
	blob := func(mt types.MediaType, make func(t *testing.T) []byte) setup {
		return func(t *testing.T, layout string) string { return writeBlobImage(t, layout, make(t), mt) }
	}
	cases := []struct {
		name  string
		setup setup
		want  []string
	}{
		{
			// The gzip header's MTIME is covered by no checksum of gzip's own:
			// only the digest check can catch this.
			name: "gzip header byte differs from digest",
			setup: corpusBlob(func(t *testing.T, p string) {
				flipByte(t, p, 4)
			}),
			want: []string{"layer 0 (sha256:", "layer digest mismatch"},
		},
		{
			name: "deflate byte differs from digest",
			setup: corpusBlob(func(t *testing.T, p string) {
				st, err := os.Stat(p)
				if err != nil {
					t.Fatal(err)
				}
				flipByte(t, p, st.Size()/2)
			}),
			want: []string{"layer 0 (sha256:"},
		},
		{
			// A correctly digested gzip stream without its CRC and size
			// trailer: every tar byte is there, but the stream is corrupt.
			name: "gzip trailer missing",
			setup: blob(types.OCILayer, func(t *testing.T) []byte {
				z := gzipped(t, layerTar(t, smallLayer()))
				return z[:len(z)-8]
			}),
			want: []string{"layer 0 (sha256:", "unexpected EOF"},
		},
		{
			name: "gzip stream cut in half",
			setup: blob(types.OCILayer, func(t *testing.T) []byte {
				z := gzipped(t, layerTar(t, smallLayer()))
				return z[:len(z)/2]
			}),
			want: []string{"layer 0 (sha256:", "unexpected EOF"},
		},
		{
			name: "gzip checksum wrong",
			setup: blob(types.OCILayer, func(t *testing.T) []byte {
				z := gzipped(t, layerTar(t, smallLayer()))
				z[len(z)-8] ^= 0xff
				return z
			}),
			want: []string{"layer 0 (sha256:", "gzip: invalid checksum"},
		},
		{
			name: "gzip followed by garbage",
			setup: blob(types.OCILayer, func(t *testing.T) []byte {
				return append(gzipped(t, layerTar(t, smallLayer())), "this is not a gzip member"...)
			}),
			want: []string{"layer 0 (sha256:", "gzip: invalid header"},
		},
		{
			name: "zstd stream cut in half",
			setup: blob(types.OCILayerZStd, func(t *testing.T) []byte {
				z := zstdCompressed(t, layerTar(t, smallLayer()))
				return z[:len(z)/2]
			}),
			want: []string{"layer 0 (sha256:", "unexpected EOF"},
		},
		{
			name: "zstd checksum missing",
			setup: blob(types.OCILayerZStd, func(t *testing.T) []byte {
				z := zstdCompressed(t, layerTar(t, smallLayer()))
				return z[:len(z)-4]
			}),
			want: []string{"layer 0 (sha256:", "unexpected EOF"},
		},
		{
			// The second header (entry "d/f0", after the 512-byte header of
			// "d/") gets another name, so its checksum no longer matches.
			name: "tar header checksum wrong",
			setup: blob(types.OCILayer, func(t *testing.T) []byte {
				tb := layerTar(t, smallLayer())
				if got := string(tb[512:516]); got != "d/f0" {
					t.Fatalf("second header names %q, want d/f0", got)
				}
				tb[512+2] = 'g'
				return gzipped(t, tb)
			}),
			want: []string{"layer 0 (sha256:", "invalid tar header"},
		},
		{
			name: "unknown layer media type",
			setup: blob("application/vnd.example.layer.v1+weird", func(t *testing.T) []byte {
				return gzipped(t, layerTar(t, smallLayer()))
			}),
			want: []string{"layer 0 (sha256:", `unsupported media type "application/vnd.example.layer.v1+weird"`},
		},
		{
			name: "already RAFS",
			setup: func(t *testing.T, layout string) string {
				src := writeBlobImage(t, layout, gzipped(t, layerTar(t, smallLayer())), types.OCILayer)
				rafsRef := "oci:" + layout + ":rafs"
				mustConvert(t, src, rafsRef, options(t))
				return rafsRef
			},
			want: []string{"is already a RAFS image"},
		},
		{
			// The current RAFS types are under the OCI layer prefix; a
			// layer of one is refused even without the manifest's
			// annotation, never read as a tar.
			name: "RAFS blob layer, no annotation",
			setup: func(t *testing.T, layout string) string {
				return writeBlobImage(t, layout, gzipped(t, layerTar(t, smallLayer())), types.MediaType(rafs.MediaTypeBlob))
			},
			want: []string{"is already a RAFS image"},
		},
		{
			name: "legacy RAFS bootstrap layer, no annotation",
			setup: func(t *testing.T, layout string) string {
				return writeBlobImage(t, layout, gzipped(t, layerTar(t, smallLayer())), types.MediaType(rafs.LegacyMediaTypeBootstrap))
			},
			want: []string{"is already a RAFS image"},
		},
	}
	// Hostile layers, but for the symlink escapes that conversion confines
	// to the root (TestConvertConfinesSymlinkEscapes).
	hostile := rafstest.HostileLayers()
	wantEntry := map[string]string{
		"dotdot":           "../escape",
		"dotdot-nested":    "ok/../../escape",
		"absolute":         "/etc/x",
		"hardlink-missing": "link",
		"hardlink-escape":  "passwd",
		"hardlink-dir":     "l",
		"truncated":        "huge",
	}
	var names []string
	for name := range hostile {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		entry, ok := wantEntry[name]
		if !ok {
			if !strings.HasPrefix(name, "symlink-") {
				t.Errorf("hostile layer %q has no expectation here", name)
			}
			continue
		}
		cases = append(cases, struct {
			name  string
			setup setup
			want  []string
		}{
			name: "hostile " + name,
			setup: func(t *testing.T, layout string) string {
				if err := rafstest.WriteOCILayout(t.Context(), layout, rafstest.Image{Name: "src", Layers: []rafstest.Layer{hostile[name]}}); err != nil {
					t.Fatal(err)
				}
				return "oci:" + layout + ":src"
			},
			want: []string{"layer 0 (sha256:", "entry " + strconv.Quote(entry) + ":"},
		})
	}

	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			layout := filepath.Join(t.TempDir(), "oci")
			src := tc.setup(t, layout)
			opts := options(t)
			dst := "oci:" + layout + ":out"
			_, err := convert.Convert(t.Context(), src, dst, opts)
			if err == nil {
				t.Fatalf("convert %s: got no error, want one containing %q", tc.name, tc.want)
			}
			t.Logf("error: %v", err)
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got error %q, want it to contain %q", err, w)
				}
			}
			requireAbsent(t, dst, opts.WorkDir)
		})
	}
}

// TestConvertConfinesSymlinkEscapes: a file written through a symlink that
// points out of the root lands inside the root, where umoci puts it too.
func TestConvertConfinesSymlinkEscapes(t *testing.T) {
	t.Parallel()
	hostile := rafstest.HostileLayers()
	for _, tc := range []struct {
		layer        string
		link, target string
		file, data   string
	}{
		{"symlink-escape", "evil", "../../..", "x", "written through a symlink\n"},
		{"symlink-abs-escape", "abs", "/tmp", "tmp/x", "written through an absolute symlink\n"},
	} {
		t.Run(tc.layer, func(t *testing.T) {
			t.Parallel()
			layout := filepath.Join(t.TempDir(), "oci")
			if err := rafstest.WriteOCILayout(t.Context(), layout, rafstest.Image{Name: "src", Layers: []rafstest.Layer{hostile[tc.layer]}}); err != nil {
				t.Fatal(err)
			}
			mustConvert(t, "oci:"+layout+":src", "oci:"+layout+":rafs", options(t))
			img := mustOpen(t, "oci:"+layout+":rafs")
			fsys := img.FS(t.Context())
			if got, err := fsys.ReadLink(tc.link); err != nil || got != tc.target {
				t.Errorf("readlink %s: got %q, %v, want %q", tc.link, got, err, tc.target)
			}
			if got, err := fs.ReadFile(fsys, tc.file); err != nil || string(got) != tc.data {
				t.Errorf("read %s: got %q, %v, want %q", tc.file, got, err, tc.data)
			}
			var paths []string
			if err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
				paths = append(paths, p)
				return err
			}); err != nil {
				t.Fatal(err)
			}
			want := []string{".", tc.link, tc.file}
			if tc.file == "tmp/x" {
				want = []string{".", tc.link, "tmp", tc.file}
			}
			if strings.Join(paths, " ") != strings.Join(want, " ") {
				t.Errorf("tree: got %q, want %q", paths, want)
			}
			// Unpacking writes nothing beside the destination.
			dest := unpack(t, img)
			ents, err := os.ReadDir(filepath.Dir(dest))
			if err != nil {
				t.Fatal(err)
			}
			if len(ents) != 1 {
				t.Errorf("unpack's parent holds %d entries, want 1 (the destination)", len(ents))
			}
			if _, err := os.Lstat(filepath.Join(dest, tc.file)); err != nil {
				t.Errorf("unpacked %s: %v", tc.file, err)
			}
		})
	}
}
