package rafs

import (
	"bytes"
	"context"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"damselfly/rafs/rafstest"
)

// seedBootstraps builds a few small images whose bootstraps seed the
// decoder fuzzer.
func seedBootstraps(t testing.TB) [][]byte {
	var out [][]byte
	imgs := rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: MinChunkSize})
	for _, img := range imgs {
		switch img.Name {
		case "whiteouts", "hardlinks", "symlinks", "meta", "devices":
		default:
			continue
		}
		var tars [][]byte
		for _, l := range img.Layers {
			var b bytes.Buffer
			if err := rafstest.WriteLayerTar(&b, l); err != nil {
				t.Fatal(err)
			}
			tars = append(tars, b.Bytes())
		}
		res, err := Build(context.Background(), layersOf(tars...), BuildOptions{ChunkSize: MinChunkSize, BlobDir: t.TempDir(), Prefetch: []string{"/*"}})
		if err != nil {
			t.Fatalf("%s: %v", img.Name, err)
		}
		out = append(out, res.Bootstrap)
	}
	return out
}

// exercise touches every decoder entry point; it must never panic or
// loop, whatever data holds.
func exercise(b *Bootstrap) {
	_, _ = Summarize(b)
	_, _ = b.LookupPath("a/b/../c")
	if b.Validate() != nil {
		// Only a validated bootstrap may be walked in full: the checks
		// that make a walk linear are Validate's.
		return
	}
	fsys := NewFS(context.Background(), b, nil)
	n := 0
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if n++; n > 10000 || err != nil {
			return fs.SkipAll
		}
		if info, err := d.Info(); err == nil {
			in := info.Sys().(Inode)
			_, _ = b.Xattrs(in)
			if in.IsSymlink() {
				_, _ = fsys.ReadLink(p)
				_, _ = fsys.Stat(p) // follows the link
			}
			for i := uint32(0); i < in.DataCount && i < 4 && in.IsReg(); i++ {
				_, _ = b.FileChunk(in, i)
			}
		}
		return nil
	})
	_, _ = b.Prefetch()
	for i := uint32(0); i < b.ChunkCount() && i < 64; i++ {
		_, _ = b.Chunk(i)
	}
}

func FuzzDecode(f *testing.F) {
	for _, s := range seedBootstraps(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		// Skip the checksum so the fuzzer reaches the structure; a
		// hostile bootstrap can carry a valid checksum anyway.
		b, err := Decode(data, OpenOptions{SkipChecksum: true})
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Decode error is not ErrCorrupt: %v", err)
			}
			return
		}
		exercise(b)
	})
}

func TestCorruptBootstrap(t *testing.T) {
	seeds := seedBootstraps(t)
	good := seeds[0]
	if _, err := Decode(good, OpenOptions{}); err != nil {
		t.Fatal(err)
	}
	// Any flipped byte: the checksum catches it.
	for i := 0; i < len(good); i += 1 + len(good)/2000 {
		bad := bytes.Clone(good)
		bad[i] ^= 0x5a
		if _, err := Decode(bad, OpenOptions{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("byte %d flipped: got %v, want ErrCorrupt", i, err)
		}
	}
	// Any truncation.
	for n := 0; n < len(good); n += 1 + len(good)/500 {
		if _, err := Decode(good[:n], OpenOptions{}); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("truncated to %d: got %v, want ErrCorrupt", n, err)
		}
	}
	// Without the checksum every flip must still decode safely, and the
	// full walk must not panic.
	for i := superblockSize; i < len(good); i += 1 + len(good)/3000 {
		bad := bytes.Clone(good)
		bad[i] ^= 0xff
		if b, err := Decode(bad, OpenOptions{SkipChecksum: true}); err == nil {
			exercise(b)
		}
	}
}

func TestHostileBootstrapCounts(t *testing.T) {
	good := seedBootstraps(t)[0]
	cases := map[string]func(b []byte){
		"huge inode count":   func(b []byte) { le.PutUint32(b[24:], 1<<31) },
		"section past end":   func(b []byte) { le.PutUint64(b[72+16*secChunks+8:], 1<<40) },
		"odd section size":   func(b []byte) { le.PutUint64(b[72+16*secInodes+8:], le.Uint64(b[72+16*secInodes+8:])-1) },
		"bad chunk size":     func(b []byte) { le.PutUint32(b[16:], 3000) },
		"unknown flags":      func(b []byte) { le.PutUint32(b[12:], 4) },
		"unknown version":    func(b []byte) { le.PutUint32(b[8:], 99) },
		"root not dir":       func(b []byte) { off := le.Uint64(b[72:]); le.PutUint32(b[off:], ModeReg|0o644) },
		"length mismatch":    func(b []byte) { le.PutUint64(b[32:], uint64(len(b)+8)) },
		"unknown compressor": func(b []byte) { b[20] = 7 },
	}
	for name, mutate := range cases {
		t.Run(name, func(t *testing.T) {
			bad := bytes.Clone(good)
			mutate(bad)
			reseal(bad)
			if _, err := Decode(bad, OpenOptions{}); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("got %v, want ErrCorrupt", err)
			}
		})
	}
}

func FuzzBuildLayer(f *testing.F) {
	for _, img := range rafstest.Corpus(rafstest.CorpusOptions{ChunkSize: MinChunkSize}) {
		if img.Name == "sizes" || img.Name == "base-v1" || img.Name == "base-v2" {
			continue // large bodies slow every fuzz iteration
		}
		for _, l := range img.Layers {
			var b bytes.Buffer
			if err := rafstest.WriteLayerTar(&b, l); err != nil {
				f.Fatal(err)
			}
			f.Add(b.Bytes())
		}
	}
	for _, l := range rafstest.HostileLayers() {
		var b bytes.Buffer
		_ = rafstest.WriteLayerTar(&b, l)
		f.Add(b.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		res, err := Build(context.Background(), layersOf(data, data), BuildOptions{ChunkSize: MinChunkSize, BlobDir: dir, Workers: 2})
		if err != nil {
			return
		}
		// Whatever the builder accepts, it must encode validly and read
		// back completely.
		b, err := Decode(res.Bootstrap, OpenOptions{})
		if err != nil {
			t.Fatalf("builder output does not decode: %v", err)
		}
		if err := b.Validate(); err != nil {
			t.Fatalf("builder output does not validate: %v", err)
		}
		blobs := NewDirBlobs(dir)
		defer blobs.Close()
		fsys := NewFS(context.Background(), b, &BlobChunkSource{Bootstrap: b, Blobs: blobs})
		err = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.Type().IsRegular() {
				f, err := fsys.Open(p)
				if err != nil {
					return err
				}
				defer f.Close()
				_, err = io.Copy(io.Discard, f.(io.Reader))
				return err
			}
			return nil
		})
		if err != nil {
			t.Fatalf("reading builder output: %v", err)
		}
	})
}

// zeroChunks serves every chunk as zeros, unverified: FuzzUnpack looks
// at where Unpack writes, not at what.
type zeroChunks struct{}

func (zeroChunks) ReadChunk(_ context.Context, _ Chunk, dst []byte) error {
	clear(dst)
	return nil
}

// Unpacking a hostile bootstrap writes nothing outside its destination:
// whatever names, links and types the bootstrap holds, the directory
// around dest ends up holding dest alone (or nothing, when Unpack
// fails), and the sibling directory a symlink could point at stays
// empty.
func FuzzUnpack(f *testing.F) {
	for _, s := range seedBootstraps(f) {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := Decode(data, OpenOptions{SkipChecksum: true})
		if err != nil || b.Validate() != nil {
			return
		}
		if s, err := Summarize(b); err != nil || s.Bytes > 8<<20 || s.Files+s.Dirs+s.Symlinks+s.Others > 2000 {
			return // bounded work per input
		}
		top := t.TempDir()
		root, outside := filepath.Join(top, "root"), filepath.Join(top, "outside")
		for _, d := range []string{root, outside} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		dest := filepath.Join(root, "dest")
		err = Unpack(context.Background(), b, zeroChunks{}, dest, UnpackOptions{Rootless: true, Workers: 2})
		names := func(dir string) []string {
			ents, err := os.ReadDir(dir)
			if err != nil {
				t.Fatal(err)
			}
			var out []string
			for _, e := range ents {
				out = append(out, e.Name())
			}
			return out
		}
		if got := names(outside); len(got) != 0 {
			t.Fatalf("Unpack (err %v) wrote %v into a sibling of its root", err, got)
		}
		got := names(root)
		if err != nil && len(got) != 0 || err == nil && (len(got) != 1 || got[0] != "dest") {
			t.Fatalf("Unpack (err %v) left %v beside dest", err, got)
		}
		if got := names(top); len(got) != 2 {
			t.Fatalf("Unpack (err %v) left %v above its root", err, got)
		}
	})
}
