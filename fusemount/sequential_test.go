package fusemount

import (
	"bytes"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

func TestSeqTracker(t *testing.T) {
	t.Parallel()
	const cs = 64 << 10
	type read struct {
		off, size uint64
		last      uint32
		ahead     bool
	}
	cases := []struct {
		name  string
		reads []read
	}{
		{"sequential from the start, once per chunk", []read{
			{0, 16 << 10, 0, true},
			{16 << 10, 16 << 10, 0, false},
			{32 << 10, 32 << 10, 0, false},
			{64 << 10, 128 << 10, 2, true},
			{192 << 10, 1, 3, true},
		}},
		{"out of order within the slack still counts", []read{
			{0, 128 << 10, 1, true},
			{256 << 10, 128 << 10, 5, true},
			{128 << 10, 128 << 10, 0, false},
		}},
		{"a first read in the middle is random", []read{
			{5 << 20, 4096, 0, false},
			{5<<20 + 4096, 128 << 10, 82, true},
		}},
		{"a jump past the slack is random", []read{
			{0, 4096, 0, true},
			{4096 + seqSlack + 1, 4096, 0, false},
		}},
		{"an empty read changes nothing", []read{
			{0, 0, 0, false},
			{0, 1, 0, true},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var s seqTracker
			for i, r := range tc.reads {
				last, ahead := s.advance(r.off, r.size, cs)
				if ahead != r.ahead || (ahead && last != r.last) {
					t.Errorf("read %d (%d+%d): got (%d, %v), want (%d, %v)", i, r.off, r.size, last, ahead, r.last, r.ahead)
				}
			}
		})
	}
}

// largestFile returns the regular file of b with the most chunks.
func largestFile(t *testing.T, b *rafs.Bootstrap) (string, rafs.Inode) {
	t.Helper()
	var best rafs.Inode
	var bestPath string
	err := fs.WalkDir(rafs.NewFS(t.Context(), b, nil), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		in, err := b.LookupPath(p)
		if err != nil {
			return err
		}
		if in.DataCount > best.DataCount {
			best, bestPath = in, p
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return bestPath, best
}

// Readahead fetches the window after a chunk in the background, in
// parallel, into memory: the reads that follow are served from there.
func TestFetcherReadahead(t *testing.T) {
	t.Parallel()
	fx := newFetcherFixture(t)
	c := openCache(t, filepath.Join(t.TempDir(), "cache"))
	m := NewMetrics()
	f, err := NewFetcher(fx.boot, c, fx.be, FetcherConfig{AmplifyIO: 64 << 10, ReadaheadChunks: 4}, m, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	_, in := largestFile(t, fx.boot)
	if in.DataCount < 6 {
		t.Fatalf("largest file has %d chunks, want at least 6", in.DataCount)
	}
	f.Readahead(in, 0)
	deadline := time.Now().Add(20 * time.Second)
	for i := uint32(1); i <= 4; i++ {
		ck, err := fx.boot.FileChunk(in, i)
		if err != nil {
			t.Fatal(err)
		}
		for !f.mem.Contains(ck.Index) {
			if time.Now().After(deadline) {
				t.Fatalf("chunk %d of the file not read ahead after 20s", i)
			}
			time.Sleep(5 * time.Millisecond)
		}
		if !c.Has(cache.KeyOf(ck)) {
			t.Errorf("chunk %d read ahead but not in the node cache", i)
		}
	}
	ck, err := fx.boot.FileChunk(in, 5)
	if err != nil {
		t.Fatal(err)
	}
	if f.mem.Contains(ck.Index) || c.Has(cache.KeyOf(ck)) {
		t.Errorf("chunk 5 fetched: readahead went past its window of 4")
	}
	if got := counter(m, "damselfly_mount_readahead_fetches_total"); got < 1 || got > 4 {
		t.Errorf("readahead fetches: got %v, want 1..4", got)
	}
	for i := uint32(1); i <= 4; i++ {
		ck, _ := fx.boot.FileChunk(in, i)
		got := make([]byte, ck.Size)
		if err := f.ReadChunk(t.Context(), ck, got); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, fx.want[ck.Index]) {
			t.Fatalf("chunk %d: wrong bytes", i)
		}
	}
	if got := counter(m, "damselfly_mount_reads_total"); got != 4 {
		t.Errorf("reads: got %v, want 4", got)
	}
	if got := labelled(m, "damselfly_mount_reads_total", SourceMemory); got != 4 {
		t.Errorf("reads from memory after readahead: got %v, want 4", got)
	}
}

// A sequential read through the mount starts readahead; every byte is
// the image's.
func TestMountReadsAhead(t *testing.T) {
	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":sizes-rafs"
	cfg := testConfig(t)
	cfg.ReadaheadChunks = 4
	cfg.Prefetch.Enable = false // its fetches would be the ones in flight
	mp, d, _ := mountT(t, Options{Image: ref, Config: cfg})
	p, in := largestFile(t, d.boot)
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	want, err := fs.ReadFile(img.FS(t.Context()), p)
	if err != nil {
		t.Fatal(err)
	}
	before := counter(d.metrics, "damselfly_mount_readahead_fetches_total")
	fd, err := os.Open(filepath.Join(mp, p))
	if err != nil {
		t.Fatal(err)
	}
	defer fd.Close()
	// Without the kernel's own readahead, whose window would cover this
	// small file at once, the daemon sees the reads as issued.
	if err := unix.Fadvise(int(fd.Fd()), 0, 0, unix.FADV_RANDOM); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 0, len(want))
	buf := make([]byte, 32<<10)
	for {
		n, err := fd.Read(buf)
		got = append(got, buf[:n]...)
		if err == io.EOF || n == 0 {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: %d bytes read, differ from the image's %d", p, len(got), len(want))
	}
	if after := counter(d.metrics, "damselfly_mount_readahead_fetches_total"); after <= before {
		t.Errorf("readahead fetches during a sequential read of %d chunks: got %v, want more than 0", in.DataCount, after-before)
	}
}

// labelled is the counter name's value for source.
func labelled(m *Metrics, name, source string) float64 {
	mfs, err := m.Registry.Gather()
	if err != nil {
		return -1
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, x := range mf.GetMetric() {
			for _, l := range x.GetLabel() {
				if l.GetName() == "source" && l.GetValue() == source {
					return x.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// On a kernel with open-less reads, files are read without OPEN and
// RELEASE, the bytes are the image's, and a second open of a file is
// served from the page cache (as FOPEN_KEEP_CACHE did with opens). With
// file copies (and passthrough) every open is answered: it is off here.
func TestOpenlessReads(t *testing.T) {
	layout, _ := corpusLayout(t)
	ref := "oci:" + layout + ":sizes-rafs"
	cfg := testConfig(t)
	cfg.Prefetch.Enable = false
	cfg.FileCopies.Enable = false
	mp, d, _ := mountT(t, Options{Image: ref, Config: cfg})
	if d.server.KernelSettings().Flags64()&fuse.CAP_NO_OPEN_SUPPORT == 0 {
		rafstest.SkipOrFail(t, "the kernel does not offer FUSE_NO_OPEN_SUPPORT")
	}
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	p, _ := largestFile(t, d.boot)
	want, err := fs.ReadFile(img.FS(t.Context()), p)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		before := counter(d.metrics, "damselfly_mount_reads_total")
		got, err := os.ReadFile(filepath.Join(mp, p))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("read %d of %s: bytes differ from the image's", i, p)
		}
		reads := counter(d.metrics, "damselfly_mount_reads_total") - before
		switch {
		case i == 0 && reads == 0:
			t.Errorf("first read of %s: the daemon served no read", p)
		case i == 1 && reads != 0:
			t.Errorf("second open and read of %s: the daemon served %v reads, want 0 (page cache kept)", p, reads)
		}
	}
	d.fsys.mu.Lock()
	handles := d.fsys.nextFh
	d.fsys.mu.Unlock()
	if handles != 0 {
		t.Errorf("%d file handles made for open-less reads, want 0", handles)
	}
}
