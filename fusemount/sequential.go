package fusemount

import (
	"sync"

	"damselfly/rafs"
)

// Readaheader is a ChunkReader that can fetch the chunks after a
// sequential read in the background. The filesystem finds it by type
// assertion and calls it as a sequential reader enters a new chunk.
type Readaheader interface {
	// Readahead starts fetching the chunks of file in after its chunk
	// idx (counted within the file) that are not at hand. It never
	// blocks and is safe for concurrent use.
	Readahead(in rafs.Inode, idx uint32)
}

var _ Readaheader = (*Fetcher)(nil)

// seqSlack is how far a read may start from where the reads of a file
// have got to and still count as sequential. The kernel's own readahead
// sends several reads of one stream at once and they arrive out of order,
// so an exact match would miss most sequential readers.
const seqSlack = 1 << 20

// seqTracker follows the reads of one open file. Safe for concurrent use.
type seqTracker struct {
	mu      sync.Mutex
	started bool
	next    uint64 // end of the furthest read so far
	raAfter uint64 // 1 + the file chunk readahead last started after; 0: none
}

// advance records a read of size bytes at off, in chunks of cs bytes.
// It returns the last chunk the read touches, and true when the read
// is sequential and is the first to reach that chunk: the moment to
// read ahead of it.
func (s *seqTracker) advance(off, size, cs uint64) (uint32, bool) {
	if size == 0 || cs == 0 {
		return 0, false
	}
	end := off + size
	s.mu.Lock()
	defer s.mu.Unlock()
	sequential := off == 0
	if s.started {
		sequential = off+seqSlack >= s.next && off <= s.next+seqSlack
	}
	s.started = true
	s.next = max(s.next, end)
	last := (end - 1) / cs
	if !sequential || last+1 <= s.raAfter {
		return 0, false
	}
	s.raAfter = last + 1
	return uint32(last), true
}

// openlessHold marks a failure-hold key that names a reading thread,
// not a file handle (handles count up from 1).
const openlessHold = 1 << 63

// openlessTrackers follow sequential reading when the kernel reads
// without opening files, so there is no handle to hang a tracker on: one
// tracker per file and reading thread, in a fixed table (a collision
// only restarts a tracker). Safe for concurrent use.
type openlessTrackers struct {
	mu    sync.Mutex
	slots [256]struct {
		ino rafs.Ino
		pid uint32
		t   *seqTracker
	}
}

// get returns the tracker of ino read by thread pid.
func (o *openlessTrackers) get(ino rafs.Ino, pid uint32) *seqTracker {
	i := (uint64(ino)*0x9e3779b97f4a7c15 ^ uint64(pid)*0xbf58476d1ce4e5b9) >> 56
	o.mu.Lock()
	defer o.mu.Unlock()
	s := &o.slots[i]
	if s.t == nil || s.ino != ino || s.pid != pid {
		s.ino, s.pid, s.t = ino, pid, &seqTracker{}
	}
	return s.t
}
