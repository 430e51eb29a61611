package cluster

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs"
)

// longOutage is how long TestLongRegistryOutage keeps the registry down:
// minutes, as a registry restart or an upgrade takes, and less than the
// mount's default deadline (3m), which is meant to outlast it.
const longOutage = 2 * time.Minute

// Scenario 9: the registry is down for minutes while jobs read.
//   - A job on node B reads, one file at a time across the whole outage,
//     the files node A read before it: every read succeeds, from A.
//   - On node C, a mount with an 8s deadline reads a file nobody holds:
//     the read fails at its deadline with EIO, and the mount's log names
//     the image, the file and the chunk; once the registry is back the
//     same read succeeds.
//   - On node C, a mount with the default deadline reads another file
//     nobody holds: the read blocks through the outage and succeeds soon
//     after the registry returns.
func TestLongRegistryOutage(t *testing.T) {
	t.Parallel()
	c := newCluster(t)
	im := pushImage(t, c.reg, "sample", sampleImage(), rafs.MinChunkSize)
	files := im.regularFiles(t, 0)
	// The two largest files are the ones nobody reads before the outage:
	// their first chunks hold only their own bytes.
	size := func(f string) int64 {
		st, err := os.Stat(filepath.Join(im.umoci, f))
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	bySize := slices.Clone(files)
	slices.SortFunc(bySize, func(x, y string) int { return int(size(y) - size(x)) })
	short, long := bySize[0], bySize[1]
	if size(long) < 4*rafs.MinChunkSize {
		t.Fatalf("second largest file %s has %d bytes, want several chunks", long, size(long))
	}
	held := slices.DeleteFunc(slices.Clone(files), func(f string) bool { return f == short || f == long })

	// No amplification and no readahead, so that every node asks for
	// just what it reads.
	const narrow = "advanced:\n  amplify_io: 65536\n  readahead_chunks: 0\n"
	a, b, n3 := c.addNode("a", ""), c.addNode("b", ""), c.addNode("c", "")
	if failed := a.mount(im, narrow).readFiles(im, held); len(failed) > 0 {
		t.Fatalf("node A: %d reads failed with the registry up: %v", len(failed), failed)
	}
	mb := b.mount(im, narrow)
	mShort := n3.mount(im, narrow)
	mLong := n3.mountDeadline(im, "", narrow)

	c.reg.down()
	down := time.Now()

	// The job on B: the held files, paced to span the outage.
	pace := (longOutage - 10*time.Second) / time.Duration(len(held))
	job := make(chan readResult, 1)
	quit, ended := make(chan struct{}), make(chan struct{})
	t.Cleanup(func() { close(quit); <-ended })
	go func() {
		defer close(ended)
		res := readResult{failed: map[string]error{}}
		for i, f := range held {
			for time.Until(down.Add(time.Duration(i)*pace)) > 0 {
				select {
				case <-quit:
					return
				case <-time.After(10 * time.Millisecond):
				}
			}
			failed, err := mb.readFilesErr(im, []string{f})
			for k, v := range failed {
				res.failed[k] = v
			}
			if err != nil {
				res.bad++
				res.err = errors.Join(res.err, err)
			}
		}
		job <- res
	}()

	// The default deadline: blocks until the registry is back.
	type longRead struct {
		err error
		at  time.Time
	}
	longDone := make(chan longRead, 1)
	go func() {
		got, err := os.ReadFile(filepath.Join(mLong.dir, long))
		if err == nil {
			want, werr := os.ReadFile(filepath.Join(im.umoci, long))
			if werr != nil || !bytes.Equal(got, want) {
				err = errors.Join(werr, errors.New("wrong bytes"))
			}
		}
		longDone <- longRead{err, time.Now()}
	}()

	// The 8s deadline: fails at it.
	start := time.Now()
	_, err := readHead(filepath.Join(mShort.dir, short))
	elapsed := time.Since(start)
	t.Logf("measured: long outage: read of unheld chunks (deadline 8s) failed after %s: %v", elapsed.Round(time.Millisecond), err)
	if !errors.Is(err, syscall.EIO) {
		t.Fatalf("read of %s with the registry down: got %v, want EIO", short, err)
	}
	checkDeadlineFailure(t, elapsed, 8*time.Second)
	logLine := mShort.p.logLine("read failed")
	t.Logf("mount log: %s", logLine)
	for _, want := range []string{im.repo, short, "chunk=sha256:", "retry deadline exceeded"} {
		if !strings.Contains(logLine, want) {
			t.Errorf("the mount's log line %q does not name %q", logLine, want)
		}
	}

	select {
	case r := <-longDone:
		t.Fatalf("read with the default deadline ended while the registry was down (after %s): %v", r.at.Sub(down), r.err)
	case <-time.After(time.Until(down.Add(longOutage))):
	}
	c.reg.up()
	up := time.Now()
	t.Logf("measured: long outage: registry down for %s", up.Sub(down).Round(time.Millisecond))

	var r longRead
	select {
	case r = <-longDone:
	case <-time.After(time.Minute):
		t.Fatalf("read with the default deadline still blocked a minute after the registry returned")
	}
	t.Logf("measured: long outage: read of unheld chunks (default deadline) succeeded %s after the registry returned (%s after it started): %v",
		r.at.Sub(up).Round(time.Millisecond), r.at.Sub(down).Round(time.Millisecond), r.err)
	if r.err != nil {
		t.Errorf("read of %s with the default deadline: %v", long, r.err)
	}

	start = time.Now()
	if failed := mShort.readFiles(im, []string{short}); len(failed) > 0 {
		t.Errorf("8s-deadline mount after the registry returned: %v", failed)
	}
	t.Logf("measured: long outage: after the registry returned, the failed file read in %s", time.Since(start).Round(time.Millisecond))

	res := <-job
	st := mb.status()
	t.Logf("measured: long outage: node B's job read %d files over %s: %d failed, %d with wrong bytes; %d bytes from peers, %d from origin",
		len(held), time.Since(down).Round(time.Second), len(res.failed), res.bad, b.peerBytes("peer"), b.peerBytes("origin"))
	if len(res.failed) > 0 || res.err != nil || st.Errors > 0 {
		t.Errorf("node B's job: %d reads failed, %d read errors: %v %v", len(res.failed), st.Errors, res.failed, res.err)
	}
	if b.peerBytes("peer") == 0 || b.peerBytes("origin") != 0 {
		t.Errorf("node B got %d bytes from peers and %d from origin, want all from peers", b.peerBytes("peer"), b.peerBytes("origin"))
	}
}
