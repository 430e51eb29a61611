package bench

import (
	"archive/tar"
	"bytes"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// makeTree writes a small tree with a subdirectory, files, a symlink and
// a hardlink pair, with fixed mtimes.
func makeTree(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	mt := time.Date(2020, 1, 2, 3, 4, 5, 600, time.UTC)
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(dir, "usr", "bin"), 0o755))
	must(os.WriteFile(filepath.Join(dir, "usr", "bin", "tool"), bytes.Repeat([]byte("tool "), 1000), 0o755))
	must(os.WriteFile(filepath.Join(dir, "a.txt"), []byte("hello\n"), 0o644))
	must(os.Link(filepath.Join(dir, "a.txt"), filepath.Join(dir, "usr", "hard.txt")))
	must(os.Symlink("usr/bin/tool", filepath.Join(dir, "link")))
	for _, p := range []string{"usr/bin/tool", "a.txt", "usr/bin", "usr", "."} {
		must(os.Chtimes(filepath.Join(dir, p), mt, mt))
	}
	return dir
}

func TestWriteTreeTar(t *testing.T) {
	dir := makeTree(t)
	var first, second bytes.Buffer
	if err := WriteTreeTar(&first, dir); err != nil {
		t.Fatal(err)
	}
	if err := WriteTreeTar(&second, dir); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(first.Bytes(), second.Bytes()) {
		t.Fatal("two writes of the same tree differ")
	}
	type ent struct {
		name string
		typ  byte
		link string
		size int64
	}
	want := []ent{
		{"a.txt", tar.TypeReg, "", 6},
		{"link", tar.TypeSymlink, "usr/bin/tool", 0},
		{"usr/", tar.TypeDir, "", 0},
		{"usr/bin/", tar.TypeDir, "", 0},
		{"usr/bin/tool", tar.TypeReg, "", 5000},
		{"usr/hard.txt", tar.TypeLink, "a.txt", 0},
	}
	tr := tar.NewReader(&first)
	for i := 0; ; i++ {
		h, err := tr.Next()
		if err == io.EOF {
			if i != len(want) {
				t.Fatalf("got %d entries, want %d", i, len(want))
			}
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if i >= len(want) {
			t.Fatalf("extra entry %q", h.Name)
		}
		got := ent{h.Name, h.Typeflag, h.Linkname, h.Size}
		if got != want[i] {
			t.Errorf("entry %d: got %+v, want %+v", i, got, want[i])
		}
		if h.Uname != "" || h.Gname != "" || !h.AccessTime.IsZero() || !h.ChangeTime.IsZero() {
			t.Errorf("%s: got uname %q gname %q atime %v ctime %v, want none", h.Name, h.Uname, h.Gname, h.AccessTime, h.ChangeTime)
		}
		if h.ModTime.Nanosecond() != 0 {
			t.Errorf("%s: got mtime %v, want whole seconds", h.Name, h.ModTime)
		}
	}
}
