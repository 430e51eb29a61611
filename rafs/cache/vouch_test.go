package cache

import (
	"errors"
	"os"
	"testing"
	"time"

	"damselfly/rafs"
)

// verifyCounter is a GetVerified verify that checks the bytes for real
// and counts its calls.
type verifyCounter struct {
	tc    testChunk
	calls int
}

func (v *verifyCounter) verify(m Meta, stored []byte) error {
	v.calls++
	ck := v.tc.ck
	ck.CompressedSize = m.StoredSize
	return rafs.VerifyChunk(ck, stored, new([]byte))
}

// stateOf is the fileID of the file at path.
func stateOf(t *testing.T, path string) fileID {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	id, ok := idOf(fi)
	if !ok {
		t.Fatalf("%s: no stat data", path)
	}
	return id
}

func getVerified(t *testing.T, c *Cache, v *verifyCounter) {
	t.Helper()
	m, got, err := c.GetVerified(v.tc.ckKey(), nil, v.verify)
	if err != nil {
		t.Fatalf("GetVerified: %v", err)
	}
	if m != v.tc.meta() || string(got) != string(v.tc.stored) {
		t.Fatalf("GetVerified: meta %+v and %d bytes, want %+v and %d", m, len(got), v.tc.meta(), len(v.tc.stored))
	}
}

// What this Cache wrote, or verified, is not verified again while the
// file stays the same; another Cache verifies once; any change to the
// file (rewritten in place, replaced) is verified again.
func TestGetVerifiedSkipsKnownFiles(t *testing.T) {
	for _, direct := range []bool{false, true} {
		t.Run(map[bool]string{false: "buffered", true: "direct"}[direct], func(t *testing.T) {
			dir := t.TempDir()
			a := openTestIO(t, Config{Dir: dir, DirectIO: direct, entryFiles: !direct})
			b := openTestIO(t, Config{Dir: dir, DirectIO: direct, entryFiles: !direct})
			v := &verifyCounter{tc: makeChunk(1, 100<<10, true)}
			mustPut(t, a, v.tc.ckKey(), v.tc.meta(), v.tc.stored)

			getVerified(t, a, v)
			if v.calls != 0 {
				t.Fatalf("the writer verified its own entry %d times, want 0", v.calls)
			}
			getVerified(t, b, v)
			getVerified(t, b, v)
			if v.calls != 1 {
				t.Fatalf("another cache verified the entry %d times over two reads, want 1", v.calls)
			}
			if s := b.Stats(); s.VouchedHits != 1 {
				t.Errorf("VouchedHits %d, want 1", s.VouchedHits)
			}

			// Rewritten in place with the same bytes: same inode, new
			// ctime (rewritten until the ctime shows it: a kernel
			// without fine-grained timestamps ticks every few ms).
			path := a.paths.entry(v.tc.ckKey())
			raw, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			before := stateOf(t, path)
			for deadline := time.Now().Add(5 * time.Second); stateOf(t, path) == before; {
				if time.Now().After(deadline) {
					t.Fatal("the entry's ctime did not change in 5 s of rewrites")
				}
				if err := os.WriteFile(path, raw, 0o600); err != nil {
					t.Fatal(err)
				}
			}
			v.calls = 0
			getVerified(t, a, v)
			getVerified(t, b, v)
			if v.calls != 2 {
				t.Fatalf("after a rewrite in place, %d verifications by the two caches, want 2", v.calls)
			}

			// Replaced by another file with the same bytes.
			tmp := path + ".new"
			if err := os.WriteFile(tmp, raw, 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.Rename(tmp, path); err != nil {
				t.Fatal(err)
			}
			v.calls = 0
			getVerified(t, a, v)
			if v.calls != 1 {
				t.Fatalf("after the file was replaced, %d verifications, want 1", v.calls)
			}
		})
	}
}

// Bytes verify refuses are removed and reported missing, and what the
// writer itself wrote is checked again once the file is not its own.
func TestGetVerifiedRemovesRefused(t *testing.T) {
	c := openTestIO(t, Config{entryFiles: true})
	good := makeChunk(2, 64<<10, true)
	k := good.ckKey()
	// A consistent entry (header and CRC right) with the wrong bytes:
	// another chunk's, put under k by a writer that did not verify.
	other := makeChunk(3, 64<<10, true)
	w := openTestIO(t, Config{Dir: c.cfg.Dir, entryFiles: true})
	mustPut(t, w, k, other.meta(), other.stored)

	v := &verifyCounter{tc: good}
	_, _, err := c.GetVerified(k, nil, v.verify)
	wantNotFound(t, "GetVerified of an entry with another chunk's bytes", err)
	if v.calls != 1 {
		t.Errorf("verify called %d times, want 1", v.calls)
	}
	if exists(c.paths.entry(k)) {
		t.Error("the refused entry is still there")
	}
	if s := c.Stats(); s.Corrupt != 1 {
		t.Errorf("Corrupt %d, want 1", s.Corrupt)
	}

	// A verify error is passed through as a miss, whatever it is.
	mustPut(t, w, k, good.meta(), good.stored)
	boom := errors.New("boom")
	_, _, err = c.GetVerified(k, nil, func(Meta, []byte) error { return boom })
	wantNotFound(t, "GetVerified with a verify that fails", err)
}
