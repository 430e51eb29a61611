package cluster

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs"
)

// Scenario 3: the registry goes down while a job on node B reads files
// node A has read: no read fails, and a job mounting the image on B
// during the outage mounts and reads them too. A read of chunks nobody holds fails
// only after the configured deadline, with EIO, and works again once the
// registry is back.
func TestRegistryOutage(t *testing.T) {
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	files := im.regularFiles(t, 0)
	// The largest file is the one nobody reads before the outage: its
	// first chunk holds only its own bytes.
	var largest string
	var size int64
	for _, f := range files {
		if st, err := os.Stat(filepath.Join(im.umoci, f)); err == nil && st.Size() > size {
			largest, size = f, st.Size()
		}
	}
	if size < 4*rafs.MinChunkSize {
		t.Fatalf("largest file %s has %d bytes, want several chunks", largest, size)
	}
	read := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == largest })

	// No amplification and no readahead on A, so that A holds just what
	// its reads needed.
	a, b := c.addNode("a", ""), c.addNode("b", "")
	ma := a.mount(im, "advanced:\n  amplify_io: 65536\n  readahead_chunks: 0\n")
	if failed := ma.readFiles(im, read); len(failed) > 0 {
		t.Fatalf("node A: %d reads failed with the registry up: %v", len(failed), failed)
	}
	// B asks for just what it reads too: a run that reached into the
	// largest file would start fetching it before the read below does.
	mb := b.mount(im, "advanced:\n  amplify_io: 65536\n  readahead_chunks: 0\n")

	c.reg.down()
	start := time.Now()
	failed := mb.readFiles(im, read)
	t.Logf("measured: registry down: node B read %d files (%d failed) in %s", len(read), len(failed), time.Since(start).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Fatalf("node B: %d of %d reads of files node A holds failed with the registry down: %v", len(failed), len(read), failed)
	}

	// A mount started while the registry is down: its manifest and
	// bootstrap come through B's peer (which kept them when B's first
	// mount went through it), its chunks from A.
	start = time.Now()
	mb2 := b.mount(im, "advanced:\n  amplify_io: 65536\n  readahead_chunks: 0\n")
	ready := time.Since(start)
	failed = mb2.readFiles(im, read)
	t.Logf("measured: registry down: a new mount on node B was ready in %s and read %d files (%d failed) in %s",
		ready.Round(time.Millisecond), len(read), len(failed), (time.Since(start) - ready).Round(time.Millisecond))
	if len(failed) > 0 {
		t.Fatalf("node B, mounted during the outage: %d of %d reads failed: %v", len(failed), len(read), failed)
	}

	// Nobody holds the largest file: reading it fails at the mount's 8s
	// deadline (the peer gives up its origin retries after its
	// fetch_deadline of 6s, and the mount retries until its own).
	start = time.Now()
	_, err := readHead(filepath.Join(mb.dir, largest))
	elapsed := time.Since(start)
	t.Logf("measured: read of unheld chunks with the registry down failed after %s: %v", elapsed.Round(time.Millisecond), err)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of %s with the registry down: got %v, want EIO", largest, err)
	}
	checkDeadlineFailure(t, elapsed, 8*time.Second)

	c.reg.up()
	start = time.Now()
	if failed := mb.readFiles(im, []string{largest}); len(failed) > 0 {
		t.Fatalf("after the registry came back: %v", failed)
	}
	t.Logf("measured: after the registry returned, %s read in %s", largest, time.Since(start).Round(time.Millisecond))
}

// deadlineMargin is how long after a mount's deadline a read that
// nobody can serve may fail: time for the FUSE round trip and the
// stopped attempt to wind down on a loaded machine running -race.
const deadlineMargin = 4 * time.Second

// checkDeadlineFailure requires a read that failed after elapsed to have
// failed at the mount's deadline: not before it, and within
// deadlineMargin after it.
func checkDeadlineFailure(t *testing.T, elapsed, deadline time.Duration) {
	t.Helper()
	if elapsed < deadline || elapsed > deadline+deadlineMargin {
		t.Errorf("read failed after %s, want at the mount's %s deadline (+%s at most)", elapsed.Round(time.Millisecond), deadline, deadlineMargin)
	}
}

// readHead reads the first 4 KiB of a file.
func readHead(path string) (int, error) {
	f, err := os.Open(path)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	return f.Read(make([]byte, 4096))
}
