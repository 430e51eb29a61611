package cache

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"io/fs"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/klauspost/compress/zstd"
	"go.uber.org/goleak"

	"damselfly/rafs"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// content returns n deterministic, partly compressible bytes for seed.
func content(seed uint64, n int) []byte {
	r := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	b := make([]byte, n)
	for i := 0; i < n; i += 8 {
		v := r.Uint64()
		if (i/64)%2 == 0 {
			v &= 0x0f0f0f0f0f0f0f0f // half the blocks compress
		}
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], v)
		copy(b[i:], w[:])
	}
	return b
}

var encoder = sync.OnceValue(func() *zstd.Encoder {
	e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedFastest), zstd.WithEncoderConcurrency(1))
	if err != nil {
		panic(err)
	}
	return e
})

// testChunk is a chunk with its content and stored bytes, as a blob would
// hold it.
type testChunk struct {
	ck     rafs.Chunk
	data   []byte
	stored []byte
}

func (tc testChunk) meta() Meta {
	return Meta{Compressed: tc.ck.Compressed(), Size: tc.ck.Size, StoredSize: tc.ck.CompressedSize}
}

// makeChunk builds a raw or zstd-compressed chunk of n bytes.
func makeChunk(seed uint64, n int, compressed bool) testChunk {
	data := content(seed, n)
	ck := rafs.Chunk{Digest: sha256.Sum256(data), Size: uint32(n)}
	stored := data
	if compressed {
		stored = encoder().EncodeAll(data, nil)
		ck.Flags = rafs.ChunkCompressed
	}
	ck.CompressedSize = uint32(len(stored))
	return testChunk{ck: ck, data: data, stored: stored}
}

// fakeDigest is a SHA-256 key for tests that do not verify content: Put
// trusts its caller.
func fakeDigest(i uint64) Key {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], i)
	return SHA256(sha256.Sum256(b[:]))
}

// rawMeta describes n raw bytes.
func rawMeta(n int) Meta { return Meta{Size: uint32(n), StoredSize: uint32(n)} }

// openTest opens a cache on cfg (Dir defaulting to a temp dir) with
// direct I/O, and closes it at the end of the test. Direct is the longer
// path through this package, so most of its tests take it; the buffered
// one (the daemons' default) is run by the tests that ask openTestIO for
// it and by every other package's.
func openTest(t testing.TB, cfg Config) *Cache {
	t.Helper()
	cfg.DirectIO = true
	return openTestIO(t, cfg)
}

// openTestIO is openTest with cfg.DirectIO as given.
func openTestIO(t testing.TB, cfg Config) *Cache {
	t.Helper()
	if cfg.Dir == "" {
		cfg.Dir = t.TempDir()
	}
	c, err := Open(cfg)
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { c.Close() })
	return c
}

func mustPut(t testing.TB, c *Cache, d Key, m Meta, stored []byte) {
	t.Helper()
	if err := c.Put(d, m, stored); err != nil {
		t.Fatalf("Put %s: %v", d, err)
	}
}

// wantNotFound fails unless err is ErrNotFound.
func wantNotFound(t testing.TB, what string, err error) {
	t.Helper()
	if !errors.Is(err, ErrNotFound) {
		t.Fatalf("%s: got error %v, want ErrNotFound", what, err)
	}
}

// entryFiles returns every entry file's size under dir (temp files and
// the lock file excluded).
func entryFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		if _, ok := parseEntryName(de.Name()); ok && de.Type().IsRegular() {
			if fi, err := de.Info(); err == nil {
				files[path] = fi.Size()
			}
		}
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return files
}

// packFiles returns every pack's size under dir.
func packFiles(t testing.TB, dir string) map[string]int64 {
	t.Helper()
	files := map[string]int64{}
	names, err := os.ReadDir(filepath.Join(dir, packsDirName))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		t.Fatal(err)
	}
	for _, de := range names {
		if parsePackName(de.Name()) {
			if fi, err := de.Info(); err == nil {
				files[de.Name()] = fi.Size()
			}
		}
	}
	return files
}

// dirBytes sums the sizes of the entry files under dir.
func dirBytes(t testing.TB, dir string) int64 {
	var n int64
	for _, s := range entryFiles(t, dir) {
		n += s
	}
	return n
}

// tempFiles lists the temp files under dir.
func tempFiles(t testing.TB, dir string) []string {
	t.Helper()
	var out []string
	filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err == nil && strings.HasPrefix(de.Name(), tempPrefix) {
			out = append(out, path)
		}
		return nil
	})
	return out
}

func exists(path string) bool {
	_, err := os.Lstat(path)
	return err == nil
}

// ckKey is tc's cache key.
func (tc testChunk) ckKey() Key { return KeyOf(tc.ck) }
