package peer

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"

	"damselfly/rafs"
	"damselfly/rafs/cache"
)

// maxHoldingFiles bounds the holdings files read at start.
const maxHoldingFiles = 1 << 16

// holdings is what the node knows it holds: per blob, the ordinals of the
// chunks in the node cache with their cache keys (digest and algorithm). It persists each blob's
// set to one file under dir (holdings_format.go), written atomically when
// flushed. Safe for concurrent use.
type holdings struct {
	dir string
	log *slog.Logger

	mu    sync.Mutex
	blobs map[rafs.Digest]map[uint32]cache.Key
	// keys counts, per blob, the ordinals held under each key: the node
	// serves a chunk as part of a blob only if it is known to be in it
	// (holdsKey).
	keys  map[rafs.Digest]map[cache.Key]int32
	dirty map[rafs.Digest]struct{}
}

func newHoldings(dir string, log *slog.Logger) *holdings {
	return &holdings{
		dir:   dir,
		log:   log,
		blobs: make(map[rafs.Digest]map[uint32]cache.Key),
		keys:  make(map[rafs.Digest]map[cache.Key]int32),
		dirty: make(map[rafs.Digest]struct{}),
	}
}

// load reads every holdings file under dir. A file that fails its checks
// is deleted with a warning; only failing to list dir is an error.
func (h *holdings) load() error {
	if h.dir == "" {
		return nil
	}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return fmt.Errorf("holdings dir: %w", err)
	}
	ents, err := os.ReadDir(h.dir)
	if err != nil {
		return fmt.Errorf("holdings dir: %w", err)
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	loaded := 0
	for _, e := range ents {
		name := e.Name()
		raw, err := hex.DecodeString(name)
		if err != nil || len(raw) != len(rafs.Digest{}) || !e.Type().IsRegular() {
			continue // temp files and strangers
		}
		if loaded == maxHoldingFiles {
			h.log.Warn("too many holdings files; ignoring the rest", "dir", h.dir, "limit", maxHoldingFiles)
			break
		}
		blob := rafs.Digest(raw)
		p := filepath.Join(h.dir, name)
		hs, err := readHoldings(p, blob)
		if err != nil {
			h.log.Warn("ignoring holdings file", "path", p, "err", err)
			_ = os.Remove(p)
			continue
		}
		loaded++
		for _, x := range hs {
			h.set(blob, x.Ordinal, x.Key)
		}
	}
	return nil
}

func readHoldings(p string, blob rafs.Digest) ([]holding, error) {
	f, err := os.Open(p)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	if max := int64(holdingsMaxLength); st.Size() > max {
		return nil, fmt.Errorf("%w: %d bytes is over the limit of %d", errHoldingsCorrupt, st.Size(), max)
	}
	b := make([]byte, st.Size())
	if _, err := f.ReadAt(b, 0); err != nil {
		return nil, err
	}
	return decodeHoldings(blob, b)
}

// add records that the node holds chunk ordinal (cache key d) of blob and
// reports whether that is news.
func (h *holdings) add(blob rafs.Digest, ordinal uint32, d cache.Key) bool {
	if ordinal >= MaxHoldingsPerBlob {
		return false
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if old, ok := h.blobs[blob][ordinal]; ok && old == d {
		return false
	}
	h.set(blob, ordinal, d)
	h.dirty[blob] = struct{}{}
	return true
}

// set records ordinal of blob as held under key k. h.mu is held.
func (h *holdings) set(blob rafs.Digest, ordinal uint32, k cache.Key) {
	m := h.blobs[blob]
	if m == nil {
		m = make(map[uint32]cache.Key)
		h.blobs[blob] = m
		h.keys[blob] = make(map[cache.Key]int32)
	}
	if old, ok := m[ordinal]; ok {
		h.unkey(blob, old)
	}
	m[ordinal] = k
	h.keys[blob][k]++
}

// del forgets ordinal of blob, and the blob once it holds nothing. h.mu
// is held.
func (h *holdings) del(blob rafs.Digest, ordinal uint32) {
	m := h.blobs[blob]
	k, ok := m[ordinal]
	if !ok {
		return
	}
	delete(m, ordinal)
	h.unkey(blob, k)
	if len(m) == 0 {
		delete(h.blobs, blob)
		delete(h.keys, blob)
	}
}

func (h *holdings) unkey(blob rafs.Digest, k cache.Key) {
	ks := h.keys[blob]
	if ks[k]--; ks[k] <= 0 {
		delete(ks, k)
	}
}

// holdsKey reports whether the node knows key k to be a chunk of blob:
// it fetched it as part of the blob (from the origin's bytes of the blob,
// or from a peer that knew it to be part of it), or read a verified
// bootstrap that says so. A chunk that is merely in the node cache, put
// there for another blob or by another process, is not served as part of
// a blob it is not known to be in: a reader may name a blob it may read
// and the digest of a chunk of one it may not.
func (h *holdings) holdsKey(blob rafs.Digest, k cache.Key) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.keys[blob][k] > 0
}

// remove forgets chunks of blob.
func (h *holdings) remove(blob rafs.Digest, ordinals []uint32) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for _, o := range ordinals {
		h.del(blob, o)
	}
	h.dirty[blob] = struct{}{}
}

// snapshot returns every holding, by blob, ordinals ascending.
func (h *holdings) snapshot() map[rafs.Digest][]holding {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[rafs.Digest][]holding, len(h.blobs))
	for b, m := range h.blobs {
		out[b] = sortedHoldings(m)
	}
	return out
}

func sortedHoldings(m map[uint32]cache.Key) []holding {
	hs := make([]holding, 0, len(m))
	for o, d := range m {
		hs = append(hs, holding{o, d})
	}
	slices.SortFunc(hs, func(a, b holding) int { return cmp.Compare(a.Ordinal, b.Ordinal) })
	return hs
}

// check drops every holding whose chunk has does not find, and returns
// what it dropped, by blob.
func (h *holdings) check(has func(cache.Key) bool) map[rafs.Digest][]uint32 {
	snap := h.snapshot()
	gone := make(map[rafs.Digest][]uint32)
	for b, hs := range snap {
		for _, x := range hs {
			if !has(x.Key) {
				gone[b] = append(gone[b], x.Ordinal)
			}
		}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	for b, ords := range gone {
		for _, o := range ords {
			if d, ok := h.blobs[b][o]; ok && !has(d) {
				h.del(b, o)
			}
		}
		h.dirty[b] = struct{}{}
	}
	return gone
}

// dropKeys forgets the holdings whose cache key is in gone and that has
// does not find (had the chunk been written again since, it stays), and
// returns what it dropped, by blob. With one blob given, only that
// blob's holdings are looked at.
func (h *holdings) dropKeys(gone map[cache.Key]struct{}, only *rafs.Digest, has func(cache.Key) bool) map[rafs.Digest][]uint32 {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[rafs.Digest][]uint32)
	drop := func(b rafs.Digest, m map[uint32]cache.Key) {
		for o, d := range m {
			if _, ok := gone[d]; ok && !has(d) {
				out[b] = append(out[b], o)
			}
		}
		if len(out[b]) == 0 {
			return
		}
		for _, o := range out[b] {
			h.del(b, o)
		}
		slices.Sort(out[b])
		h.dirty[b] = struct{}{}
	}
	if only != nil {
		if m := h.blobs[*only]; m != nil {
			drop(*only, m)
		}
		return out
	}
	for b, m := range h.blobs {
		drop(b, m)
	}
	return out
}

// flush writes the files of blobs changed since the last flush.
func (h *holdings) flush() error {
	if h.dir == "" {
		return nil
	}
	h.mu.Lock()
	type job struct {
		blob rafs.Digest
		hs   []holding
	}
	var jobs []job
	for b := range h.dirty {
		jobs = append(jobs, job{b, sortedHoldings(h.blobs[b])})
	}
	clear(h.dirty)
	h.mu.Unlock()
	var errs []error
	for _, j := range jobs {
		if err := h.write(j.blob, j.hs); err != nil {
			errs = append(errs, err)
			h.mu.Lock()
			h.dirty[j.blob] = struct{}{} // try again next time
			h.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

func (h *holdings) write(blob rafs.Digest, hs []holding) error {
	p := filepath.Join(h.dir, hex.EncodeToString(blob[:]))
	if len(hs) == 0 {
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("remove holdings of %s: %w", blob, err)
		}
		return nil
	}
	if err := os.MkdirAll(h.dir, 0o700); err != nil {
		return fmt.Errorf("holdings dir: %w", err)
	}
	f, err := os.CreateTemp(h.dir, ".tmp-")
	if err != nil {
		return fmt.Errorf("write holdings of %s: %w", blob, err)
	}
	_, err = f.Write(encodeHoldings(blob, hs))
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), p)
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("write holdings of %s: %w", blob, err)
	}
	return nil
}
