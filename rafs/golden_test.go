package rafs

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/hex"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

var update = flag.Bool("update", false, "rewrite the golden bootstraps and dumps under testdata/golden")

// goldenEntry is one tar entry of a golden image's layer. Unlike
// tarEntry it sets every field the format keeps, mtime and devices
// included, so that the goldens pin them too.
type goldenEntry struct {
	name         string
	typ          byte
	mode         int64
	data         []byte
	link         string
	uid, gid     int
	mtime        int64 // seconds; nanoseconds are derived from it
	major, minor int64
	xattrs       map[string]string
}

func goldenTar(t *testing.T, ents []goldenEntry) []byte {
	t.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, e := range ents {
		typ := e.typ
		if typ == 0 {
			typ = tar.TypeReg
		}
		mode := e.mode
		if mode == 0 {
			mode = 0o644
		}
		mt := e.mtime
		if mt == 0 {
			mt = 1700000000
		}
		h := &tar.Header{Name: e.name, Typeflag: typ, Mode: mode, Linkname: e.link, Uid: e.uid, Gid: e.gid,
			ModTime: time.Unix(mt, mt%1000*1000003).UTC(), Devmajor: e.major, Devminor: e.minor, Format: tar.FormatPAX}
		if typ == tar.TypeReg {
			h.Size = int64(len(e.data))
		}
		for k, v := range e.xattrs {
			if h.PAXRecords == nil {
				h.PAXRecords = map[string]string{}
			}
			h.PAXRecords[paxXattr+k] = v
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

// goldenImage is one fixed input and the options it is built with.
type goldenImage struct {
	name   string
	opts   BuildOptions
	layers func(t *testing.T) [][]byte
}

func goldenImages() []goldenImage {
	cs := MinChunkSize
	imgs := []goldenImage{{
		// One layer of every entry type and metadata the format keeps,
		// zstd chunks named by BLAKE3 of their content (the default
		// before blake3-stored; one-layer-stored below is the default).
		name: "one-layer",
		opts: BuildOptions{ChunkSize: uint32(cs), Digest: DigestBlake3},
		layers: func(t *testing.T) [][]byte {
			big := randBytes(7, 3*cs+17)
			zeros := make([]byte, 2*cs) // one chunk, referenced twice
			long := strings.Repeat("n", MaxNameLen)
			return [][]byte{goldenTar(t, []goldenEntry{
				{name: "./", typ: tar.TypeDir, mode: 0o755, mtime: 1600000000},
				{name: "bin/", typ: tar.TypeDir, mode: 0o755, mtime: 1600000100},
				{name: "bin/tool", data: randBytes(8, 1000), mode: 0o4755, uid: 0, gid: 0, mtime: 1600000101},
				{name: "bin/sh", typ: tar.TypeSymlink, link: "tool", mtime: 1600000102},
				{name: "bin/sh2", typ: tar.TypeLink, link: "bin/tool"},
				{name: "dev/", typ: tar.TypeDir, mode: 0o755},
				{name: "dev/null", typ: tar.TypeChar, mode: 0o666, major: 1, minor: 3},
				{name: "dev/sda", typ: tar.TypeBlock, mode: 0o660, major: 8, minor: 0, gid: 6},
				{name: "dev/fifo", typ: tar.TypeFifo, mode: 0o600},
				{name: "data/", typ: tar.TypeDir, mode: 0o750, uid: 1000, gid: 1000, mtime: 1650000000},
				{name: "data/empty", data: nil, mtime: 1650000001},
				{name: "data/one", data: []byte("1")},
				{name: "data/small-a", data: bytes.Repeat([]byte("a"), 3000), uid: 1000, gid: 1000},
				{name: "data/small-b", data: []byte("bee\n"), mode: 0o600},
				{name: "data/small-dup", data: []byte("bee\n")}, // identical small file: one place
				{name: "data/exact", data: randBytes(9, cs)},
				{name: "data/big", data: big, mode: 0o755},
				{name: "data/zeros", data: zeros},
				{name: "data/" + long, data: []byte("long name\n")},
				{name: "data/xattrs", data: []byte("x"), xattrs: map[string]string{
					"user.b": "second", "user.a": "first", "security.capability": "\x01\x00\x00\x02\x00\x20\x00\x00",
				}},
				{name: "data/sticky/", typ: tar.TypeDir, mode: 0o1777},
				{name: "data/abs", typ: tar.TypeSymlink, link: "/bin/tool"},
				{name: "data/dangling", typ: tar.TypeSymlink, link: "../nowhere/" + long},
				{name: "implicit/parent/file", data: []byte("no dir entries above me\n")},
			})}
		},
	}, {
		// Two layers: whiteouts, an opaque directory, replacements of
		// every kind, a hardlink into the lower layer, chunks shared
		// across layers. SHA-256 digests, no batching.
		name: "two-layers",
		opts: BuildOptions{ChunkSize: uint32(cs), Digest: DigestSHA256, BatchSize: -1, Level: 3},
		layers: func(t *testing.T) [][]byte {
			shared := randBytes(11, 2*cs)
			lower := goldenTar(t, []goldenEntry{
				{name: "etc/", typ: tar.TypeDir, mode: 0o755},
				{name: "etc/passwd", data: []byte("root:x:0:0::/root:/bin/sh\n")},
				{name: "etc/gone", data: []byte("deleted by the upper layer\n")},
				{name: "etc/link", typ: tar.TypeSymlink, link: "passwd"},
				{name: "opq/", typ: tar.TypeDir, mode: 0o700},
				{name: "opq/lower", data: []byte("hidden by the opaque marker\n")},
				{name: "opq/sub/", typ: tar.TypeDir, mode: 0o755},
				{name: "opq/sub/deep", data: []byte("also hidden\n")},
				{name: "dir2file/", typ: tar.TypeDir, mode: 0o755},
				{name: "dir2file/child", data: []byte("c")},
				{name: "file2dir", data: []byte("f")},
				{name: "shared", data: shared},
				{name: "meta", data: []byte("mode and owner change above\n"), mode: 0o644},
			})
			upper := goldenTar(t, []goldenEntry{
				{name: "etc/", typ: tar.TypeDir, mode: 0o711, mtime: 1700000500},
				{name: "etc/.wh.gone", data: nil},
				{name: "etc/passwd", data: []byte("root:x:0:0::/root:/bin/bash\n"), mtime: 1700000501},
				{name: "etc/passwd.hard", typ: tar.TypeLink, link: "etc/passwd"},
				{name: "opq/.wh..wh..opq", data: nil},
				{name: "opq/upper", data: []byte("only me\n")},
				{name: "dir2file", data: []byte("now a file\n")},
				{name: "file2dir/", typ: tar.TypeDir, mode: 0o755},
				{name: "file2dir/inside", data: []byte("i")},
				{name: "copy", data: append(append([]byte(nil), shared[cs:]...), shared[:cs]...)},
				{name: "meta", data: []byte("mode and owner change above\n"), mode: 0o400, uid: 33, gid: 33},
			})
			return [][]byte{lower, upper}
		},
	}, {
		// Raw chunks, a prefetch blob and its table.
		name: "prefetch-raw",
		opts: BuildOptions{ChunkSize: uint32(cs), Digest: DigestBlake3, Uncompressed: true, BatchSize: 16 << 10,
			Prefetch: []string{"/app/main", "/app/lib/*.so"}},
		layers: func(t *testing.T) [][]byte {
			return [][]byte{
				goldenTar(t, []goldenEntry{
					{name: "app/", typ: tar.TypeDir, mode: 0o755},
					{name: "app/main", data: randBytes(21, cs+100), mode: 0o755},
					{name: "app/lib/", typ: tar.TypeDir, mode: 0o755},
					{name: "app/lib/a.so", data: randBytes(22, 1500)},
					{name: "app/lib/b.so", data: randBytes(23, 2500)},
					{name: "app/lib/readme", data: []byte("not prefetched\n")},
					{name: "app/other", data: randBytes(24, 5000)},
				}),
				goldenTar(t, []goldenEntry{
					{name: "app/lib/c.so", data: randBytes(25, 700)},
					{name: "app/lib/.wh.b.so"},
				}),
			}
		},
	}}
	// The first image again with chunks named by BLAKE3 of their stored
	// bytes: its raw and compressed chunks, and the zeros referenced
	// twice, which must still be stored once.
	stored := imgs[0]
	stored.name = "one-layer-stored"
	stored.opts.Digest = 0 // the default: DigestStoredBlake3
	return append(imgs, stored)
}

// TestGoldenBootstraps pins the builder's output byte for byte: each
// golden image's bootstrap, and a dump of it (every record decoded, with
// the blob and chunk tables) that shows a layout change as a readable
// diff. Run with -update to rewrite both after an intended change, and
// read the dump's diff before committing it.
func TestGoldenBootstraps(t *testing.T) {
	for _, g := range goldenImages() {
		t.Run(g.name, func(t *testing.T) {
			t.Parallel()
			layers := g.layers(t)
			var first []byte
			// The worker count must not change a byte (Build's promise).
			for _, workers := range []int{1, 3} {
				opts := g.opts
				opts.Workers = workers
				opts.BlobDir = t.TempDir()
				res, err := Build(context.Background(), layersOf(layers...), opts)
				if err != nil {
					t.Fatalf("Build: %v", err)
				}
				if first != nil {
					if !bytes.Equal(res.Bootstrap, first) {
						t.Fatalf("%d workers built another bootstrap than 1 worker", workers)
					}
					continue
				}
				first = res.Bootstrap
				b, err := Decode(res.Bootstrap, OpenOptions{})
				if err != nil {
					t.Fatalf("Decode: %v", err)
				}
				if err := b.Validate(); err != nil {
					t.Fatalf("Validate: %v", err)
				}
				checkBlobFiles(t, opts.BlobDir, res)
				dump, err := dumpBootstrap(b, res)
				if err != nil {
					t.Fatalf("dump: %v", err)
				}
				compareGolden(t, g.name+".bootstrap", res.Bootstrap)
				compareGolden(t, g.name+".txt", []byte(dump))
			}
		})
	}
}

// checkBlobFiles checks that each new blob file is named by its digest
// and as long as the table says, so the table's digests pin the blobs.
func checkBlobFiles(t *testing.T, dir string, res *BuildResult) {
	t.Helper()
	for _, bl := range res.Blobs {
		data, err := os.ReadFile(BlobPath(dir, bl.Digest))
		if err != nil {
			t.Fatal(err)
		}
		if got := DigestSHA256.Sum(data); got != bl.Digest || uint64(len(data)) != bl.CompressedSize {
			t.Errorf("blob %d: file of %d bytes with digest %s, want %d bytes with %s", bl.Index, len(data), got, bl.CompressedSize, bl.Digest)
		}
	}
}

func compareGolden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name)
	if *update {
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run with -update to create it)", err)
	}
	if bytes.Equal(got, want) {
		return
	}
	t.Errorf("%s differs from the golden file: %s; if the change is intended, run go test -run TestGoldenBootstraps -update and review the .txt diff",
		path, firstDifference(got, want, strings.HasSuffix(name, ".txt")))
}

// firstDifference says where got first differs from want: the line of
// a text, else the byte, passing over the superblock's checksum, which
// differs whenever anything does.
func firstDifference(got, want []byte, text bool) string {
	if text {
		g, w := strings.Split(string(got), "\n"), strings.Split(string(want), "\n")
		for i := range min(len(g), len(w)) {
			if g[i] != w[i] && !strings.HasPrefix(g[i], "  checksum ") {
				return fmt.Sprintf("line %d is %q, want %q", i+1, g[i], w[i])
			}
		}
		return fmt.Sprintf("%d lines, want %d", len(g), len(w))
	}
	for i := range min(len(got), len(want)) {
		if got[i] != want[i] && (i < 40 || i >= 72) {
			return fmt.Sprintf("byte %d is %#02x, want %#02x (%d bytes, want %d)", i, got[i], want[i], len(got), len(want))
		}
	}
	return fmt.Sprintf("%d bytes, want %d", len(got), len(want))
}

// dumpBootstrap renders every field of b, record by record, and the
// build's blob table, in a fixed order.
func dumpBootstrap(b *Bootstrap, res *BuildResult) (string, error) {
	var w strings.Builder
	data := b.Bytes()
	fmt.Fprintf(&w, "superblock\n")
	fmt.Fprintf(&w, "  magic %q version %d flags %d\n", data[0:8], le.Uint32(data[8:]), le.Uint32(data[12:]))
	fmt.Fprintf(&w, "  chunk size %d compressor %s digest %s\n", b.ChunkSize(), b.Compressor(), b.DigestAlgo())
	fmt.Fprintf(&w, "  inodes %d root %d length %d\n", b.InodeCount(), le.Uint32(data[28:]), le.Uint64(data[32:]))
	fmt.Fprintf(&w, "  checksum %x\n", data[40:72])
	for i, s := range b.sec {
		fmt.Fprintf(&w, "  section %-10s at %6d, %6d bytes, %d records\n", sectionNames[i], s.off, s.size, b.count(i))
	}

	// Names, by a walk in the reader's own order.
	names := map[Ino][]string{}
	if err := walkEntries(b, func(e entry) error {
		names[e.in.Ino] = append(names[e.in.Ino], "/"+e.rel)
		return nil
	}); err != nil {
		return "", err
	}
	fmt.Fprintf(&w, "\ninodes\n")
	for ino := Ino(1); uint32(ino) <= b.InodeCount(); ino++ {
		in, err := b.Inode(ino)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&w, "  %d %s\n", ino, pathsOf(names[ino]))
		fmt.Fprintf(&w, "    %s %04o uid %d gid %d nlink %d size %d mtime %d.%09d parent %d data %d+%d xattrs %d+%d",
			typeName(in.Mode), in.Mode&ModePerm, in.UID, in.GID, in.Nlink, in.Size, in.MtimeSec, in.MtimeNsec,
			in.Parent, in.DataIndex, in.DataCount, in.XattrIdx, in.XattrCnt)
		if in.RdevMajor != 0 || in.RdevMinor != 0 {
			fmt.Fprintf(&w, " dev %d:%d", in.RdevMajor, in.RdevMinor)
		}
		fmt.Fprintln(&w)
		switch {
		case in.IsDir():
			ents, err := b.ReadDir(ino)
			if err != nil {
				return "", err
			}
			for _, e := range ents {
				fmt.Fprintf(&w, "    entry %s -> %d\n", shorten(e.Name), e.Ino)
			}
		case in.IsSymlink():
			target, err := b.Readlink(in)
			if err != nil {
				return "", err
			}
			fmt.Fprintf(&w, "    target %s\n", shorten(target))
		case in.IsReg():
			for i := range in.DataCount {
				s, err := b.FileSegment(in, i)
				if err != nil {
					return "", err
				}
				fmt.Fprintf(&w, "    ref %d: chunk %d bytes %d+%d\n", i, s.Index, s.Off, s.Len)
			}
		}
		xs, err := b.Xattrs(in)
		if err != nil {
			return "", err
		}
		for _, x := range xs {
			fmt.Fprintf(&w, "    xattr %s = %s\n", x.Name, strconv.Quote(string(x.Value)))
		}
	}

	fmt.Fprintf(&w, "\nchunks\n")
	for i := range b.ChunkCount() {
		c, err := b.Chunk(i)
		if err != nil {
			return "", err
		}
		fmt.Fprintf(&w, "  %d %x blob %d ordinal %d flags %#x stored %d+%d size %d\n",
			i, c.Digest[:], c.Blob, c.Ordinal, c.Flags, c.CompressedOffset, c.CompressedSize, c.Size)
	}
	fmt.Fprintf(&w, "\nblobs\n")
	blobs, err := b.Blobs()
	if err != nil {
		return "", err
	}
	for _, bl := range blobs {
		fmt.Fprintf(&w, "  %d %s size %d raw %d chunks %d\n", bl.Index, bl.Digest, bl.CompressedSize, bl.UncompressedSize, bl.ChunkCount)
	}
	fmt.Fprintf(&w, "  layer blobs %v, prefetch blob %d, dictionary blobs %v\n", res.LayerBlobs, res.PrefetchBlob, res.DictBlobs)
	prefetch, err := b.Prefetch()
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&w, "\nprefetch\n")
	for _, ino := range prefetch {
		fmt.Fprintf(&w, "  %d %s\n", ino, pathsOf(names[ino]))
	}
	heap := data[b.sec[secStrings].off:][:b.sec[secStrings].size]
	fmt.Fprintf(&w, "\nstrings (%d bytes)\n", len(heap))
	for line := range slices.Chunk(heap, 32) {
		fmt.Fprintf(&w, "  %s\n", strconv.Quote(string(line)))
	}
	s, err := Summarize(b)
	if err != nil {
		return "", err
	}
	fmt.Fprintf(&w, "\nsummary\n  %+v\n", s)
	fmt.Fprintf(&w, "\nbootstrap %s\n", DigestSHA256.Sum(data))
	return w.String(), nil
}

// pathsOf lists an inode's names, long ones shortened.
func pathsOf(names []string) string {
	out := make([]string, len(names))
	for i, n := range names {
		out[i] = shorten(n)
	}
	return strings.Join(out, " ")
}

// shorten keeps long names readable in the dump: their length and ends.
func shorten(s string) string {
	if len(s) <= 64 {
		return s
	}
	return fmt.Sprintf("%s...%s (%d bytes)", s[:24], s[len(s)-24:], len(s))
}

func typeName(mode uint32) string {
	switch mode & ModeType {
	case ModeDir:
		return "dir"
	case ModeReg:
		return "reg"
	case ModeLink:
		return "symlink"
	case ModeChr:
		return "chr"
	case ModeBlk:
		return "blk"
	case ModeFifo:
		return "fifo"
	case ModeSock:
		return "sock"
	}
	return "mode?" + hex.EncodeToString([]byte{byte(mode >> 12)})
}
