package rafs

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"damselfly/rafs/rafstest"
)

// tarEntry describes one entry of a test layer.
type tarEntry struct {
	name     string
	typ      byte
	mode     int64
	data     []byte
	link     string
	uid, gid int
	xattrs   map[string]string
}

func makeTar(t testing.TB, ents []tarEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	mt := time.Unix(1700000000, 123456789)
	for _, e := range ents {
		h := &tar.Header{Name: e.name, Typeflag: e.typ, Mode: e.mode, Linkname: e.link, Uid: e.uid, Gid: e.gid, ModTime: mt, Format: tar.FormatPAX}
		if h.Typeflag == 0 {
			h.Typeflag = tar.TypeReg
		}
		if h.Mode == 0 {
			h.Mode = 0o644
		}
		if h.Typeflag == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords["SCHILY.xattr."+k] = v
		}
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(e.data); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func layersOf(tars ...[]byte) []LayerSource {
	var out []LayerSource
	for i, b := range tars {
		out = append(out, LayerSource{Name: "layer" + string(rune('0'+i)), Open: func(context.Context) (io.ReadCloser, error) {
			return io.NopCloser(bytes.NewReader(b)), nil
		}})
	}
	return out
}

func randBytes(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// buildImage builds layers into a fresh blob directory and returns an FS.
func buildImage(t testing.TB, opts BuildOptions, tars ...[]byte) (*FS, *BuildResult) {
	t.Helper()
	if opts.BlobDir == "" {
		opts.BlobDir = t.TempDir()
	}
	res, err := Build(context.Background(), layersOf(tars...), opts)
	if err != nil {
		t.Fatalf("Build: %v", err)
	}
	b, err := Decode(res.Bootstrap, OpenOptions{})
	if err != nil {
		t.Fatalf("Decode: %v", err)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	return NewFS(context.Background(), b, &BlobChunkSource{Bootstrap: b, Blobs: NewDirBlobs(opts.BlobDir)}), res
}

func TestBuildMergesLayers(t *testing.T) {
	cs := MinChunkSize
	big := randBytes(1, 3*cs+17)
	zeros := make([]byte, 2*cs)
	lower := makeTar(t, []tarEntry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/passwd", data: []byte("root:x:0:0\n")},
		{name: "etc/gone", data: []byte("bye")},
		{name: "opq/", typ: tar.TypeDir, mode: 0o755},
		{name: "opq/lower", data: []byte("lower")},
		{name: "dir2file/", typ: tar.TypeDir, mode: 0o755},
		{name: "dir2file/child", data: []byte("c")},
		{name: "big", data: big, mode: 0o4755, uid: 1000, gid: 100},
		{name: "zeros", data: zeros},
		{name: "hard1", data: []byte("shared")},
		{name: "hard2", typ: tar.TypeLink, link: "hard1"},
		{name: "abs", typ: tar.TypeSymlink, link: "/etc/passwd"},
		{name: "rel", typ: tar.TypeSymlink, link: "etc/passwd"},
		{name: "dangling", typ: tar.TypeSymlink, link: "nowhere"},
		{name: "fifo", typ: tar.TypeFifo},
		{name: "x", data: []byte("x"), xattrs: map[string]string{"user.a": "1", "user.b": "two"}},
	})
	upper := makeTar(t, []tarEntry{
		{name: "etc/.wh.gone", data: nil},
		{name: "opq/", typ: tar.TypeDir, mode: 0o700},
		{name: "opq/.wh..wh..opq"},
		{name: "opq/upper", data: []byte("upper")},
		{name: "dir2file", data: []byte("now a file")},
		{name: "hard3", typ: tar.TypeLink, link: "hard1"},
		{name: "big2", data: big},
	})
	fsys, res := buildImage(t, BuildOptions{ChunkSize: uint32(cs)}, lower, upper)

	want := map[string]string{
		"etc/passwd": "root:x:0:0\n", "opq/upper": "upper", "dir2file": "now a file",
		"hard1": "shared", "hard2": "shared", "hard3": "shared", "big": string(big), "big2": string(big),
		"zeros": string(zeros), "x": "x",
	}
	for name, data := range want {
		got, err := fs.ReadFile(fsys, name)
		if err != nil {
			t.Fatalf("read %s: %v", name, err)
		}
		if !bytes.Equal(got, []byte(data)) {
			t.Errorf("%s: got %d bytes, want %d", name, len(got), len(data))
		}
	}
	for _, gone := range []string{"etc/gone", "opq/lower", "dir2file/child"} {
		if _, err := fsys.Lstat(gone); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s: got %v, want not exist", gone, err)
		}
	}
	st, _ := fsys.Lstat("hard2")
	if in := st.Sys().(Inode); in.Nlink != 3 {
		t.Errorf("hard2 nlink: got %d, want 3", in.Nlink)
	}
	st, _ = fsys.Lstat("big")
	if in := st.Sys().(Inode); in.Mode&0o7777 != 0o4755 || in.UID != 1000 || in.GID != 100 || in.MtimeNsec != 123456789 {
		t.Errorf("big: got mode %o uid %d gid %d nsec %d", in.Mode, in.UID, in.GID, in.MtimeNsec)
	}
	if l, _ := fsys.ReadLink("abs"); l != "/etc/passwd" {
		t.Errorf("abs: got %q", l)
	}
	if got, _ := fs.ReadFile(fsys, "abs"); string(got) != "root:x:0:0\n" {
		t.Errorf("read through absolute symlink: got %q", got)
	}
	st, _ = fsys.Lstat("fifo")
	if st.Mode()&fs.ModeNamedPipe == 0 {
		t.Errorf("fifo: got mode %v", st.Mode())
	}
	st, _ = fsys.Lstat("opq")
	if st.Mode().Perm() != 0o700 {
		t.Errorf("opq: got mode %v, want 0700", st.Mode())
	}
	st, _ = fsys.Lstat("x")
	xs, _ := fsys.Bootstrap().Xattrs(st.Sys().(Inode))
	if len(xs) != 2 || xs[0].Name != "user.a" || string(xs[1].Value) != "two" {
		t.Errorf("xattrs: got %v", xs)
	}
	// big and big2 (4 chunks each) share all chunks; zeros is two identical
	// chunks, one stored; small files are batched per directory: etc, opq,
	// dir2file and the root in the lower layer, opq and the root above.
	if res.Stats.Pieces != 4+4+2+6 || res.Stats.NewChunks != 4+1+6 {
		t.Errorf("stats: got %+v", res.Stats)
	}
	if res.LayerBlobs[0] != 0 || len(res.Blobs) < 1 {
		t.Errorf("layer blobs: got %v", res.LayerBlobs)
	}
}

func TestFSConformance(t *testing.T) {
	layer := makeTar(t, []tarEntry{
		{name: "etc/", typ: tar.TypeDir, mode: 0o755},
		{name: "etc/passwd", data: []byte("root:x:0:0\n")},
		{name: "etc/big", data: randBytes(9, 2*MinChunkSize+5)},
		{name: "etc/empty", data: nil},
		{name: "etc/link", typ: tar.TypeSymlink, link: "passwd"},
		{name: "etc/h", typ: tar.TypeLink, link: "etc/passwd"},
		{name: "a/b/c/", typ: tar.TypeDir, mode: 0o700},
		{name: "a/b/c/d", data: []byte("deep")},
	})
	fsys, _ := buildImage(t, BuildOptions{ChunkSize: MinChunkSize}, layer)
	if err := fstest.TestFS(fsys, "etc/passwd", "etc/big", "etc/link", "a/b/c/d"); err != nil {
		t.Error(err)
	}
}

func TestBuildDeterministic(t *testing.T) {
	layer := makeTar(t, []tarEntry{
		{name: "a", data: randBytes(2, 5*MinChunkSize+3)},
		{name: "b", data: bytes.Repeat([]byte("hello "), 100000)},
		{name: "c", data: randBytes(3, 100)},
	})
	var first []byte
	for _, w := range []int{1, 2, 7} {
		dir := t.TempDir()
		res, err := Build(context.Background(), layersOf(layer), BuildOptions{ChunkSize: MinChunkSize, BlobDir: dir, Workers: w})
		if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = res.Bootstrap
		} else if !bytes.Equal(first, res.Bootstrap) {
			t.Fatalf("workers=%d: bootstrap differs", w)
		}
	}
}

func TestBuildRejectsBadInput(t *testing.T) {
	cases := map[string][]byte{
		"dotdot":          makeTar(t, []tarEntry{{name: "../escape", data: []byte("x")}}),
		"absolute":        makeTar(t, []tarEntry{{name: "/etc/x", data: []byte("x")}}),
		"missing link":    makeTar(t, []tarEntry{{name: "l", typ: tar.TypeLink, link: "nothere"}}),
		"link escapes":    makeTar(t, []tarEntry{{name: "l", typ: tar.TypeLink, link: "../../etc/passwd"}}),
		"truncated":       makeTar(t, []tarEntry{{name: "f", data: randBytes(4, 5000)}})[:2048],
		"garbage":         bytes.Repeat([]byte{0xff}, 4096),
		"link to dir":     makeTar(t, []tarEntry{{name: "d/", typ: tar.TypeDir}, {name: "l", typ: tar.TypeLink, link: "d"}}),
		"file as parent":  makeTar(t, []tarEntry{{name: "f", data: []byte("x")}, {name: "f/g", data: []byte("y")}}),
		"root not a dir":  makeTar(t, []tarEntry{{name: ".", data: []byte("x")}}),
		"bad whiteout":    makeTar(t, []tarEntry{{name: ".wh..."}}),
		"symlink loop":    makeTar(t, []tarEntry{{name: "a", typ: tar.TypeSymlink, link: "b"}, {name: "b", typ: tar.TypeSymlink, link: "a"}, {name: "a/x", data: []byte("x")}}),
		"unsupported typ": makeTar(t, []tarEntry{{name: "s", typ: 'Z'}}),
	}
	for name, data := range cases {
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			_, err := Build(context.Background(), layersOf(data), BuildOptions{BlobDir: dir})
			if err == nil {
				t.Fatal("got nil error")
			}
			if !strings.Contains(err.Error(), "layer 0") {
				t.Errorf("error does not name the layer: %v", err)
			}
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.HasPrefix(e.Name(), ".blob-") {
					t.Errorf("temporary blob %s left behind", e.Name())
				}
			}
		})
	}
}

func TestSymlinkParentFollowedInsideRoot(t *testing.T) {
	layer := makeTar(t, []tarEntry{
		{name: "usr/", typ: tar.TypeDir, mode: 0o755},
		{name: "usr/bin/", typ: tar.TypeDir, mode: 0o755},
		{name: "bin", typ: tar.TypeSymlink, link: "usr/bin"},
		{name: "bin/sh", data: []byte("sh")},
		{name: "evil", typ: tar.TypeSymlink, link: "../../.."},
		{name: "evil/x", data: []byte("x")},
	})
	fsys, _ := buildImage(t, BuildOptions{}, layer)
	for name, want := range map[string]string{"usr/bin/sh": "sh", "x": "x"} {
		got, err := fs.ReadFile(fsys, name)
		if err != nil || string(got) != want {
			t.Errorf("%s: got %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestUnpackRoundTrip(t *testing.T) {
	rafstest.RequireRoot(t)
	layer := makeTar(t, []tarEntry{
		{name: "d/", typ: tar.TypeDir, mode: 0o750, uid: 5, gid: 6},
		{name: "d/f", data: randBytes(5, 3*MinChunkSize), mode: 0o2755},
		{name: "d/h", typ: tar.TypeLink, link: "d/f"},
		{name: "d/s", typ: tar.TypeSymlink, link: "f"},
		{name: "dev", typ: tar.TypeChar, mode: 0o600},
	})
	fsys, _ := buildImage(t, BuildOptions{ChunkSize: MinChunkSize}, layer)
	dest := filepath.Join(t.TempDir(), "out")
	b := fsys.Bootstrap()
	if err := Unpack(context.Background(), b, fsys.src, dest, UnpackOptions{}); err != nil {
		t.Fatal(err)
	}
	got, err := os.ReadFile(filepath.Join(dest, "d/h"))
	if err != nil || !bytes.Equal(got, randBytes(5, 3*MinChunkSize)) {
		t.Fatalf("d/h: %v", err)
	}
	st, err := os.Lstat(filepath.Join(dest, "d/f"))
	if err != nil || st.Mode()&fs.ModeSetgid == 0 {
		t.Fatalf("d/f mode: %v %v", st.Mode(), err)
	}
	if err := Unpack(context.Background(), b, fsys.src, dest, UnpackOptions{}); err == nil {
		t.Fatal("unpack into a non-empty directory: got nil error")
	}
}
