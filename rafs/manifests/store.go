// Package manifests is the node's store of image manifests and indexes,
// so that a node can answer for them while the origin registry cannot
// be reached: the bodies the registry served, each kept under the
// sha256 digest of its bytes, and the last tag-to-digest resolution
// seen, with its time.
//
// It is shared below the daemons because the peer's mirror (package
// proxy) fills and reads it, and peers may later serve each other from
// it. Nothing read from disk is trusted: a manifest is verified against
// its digest, and its file's header against the name it was asked for,
// every time it is read. Safe for concurrent use.
//
// # On-disk format
//
// Under the store's directory, m/HEX holds one manifest and t/HEX one tag
// resolution, HEX being the hex sha256 of "REGISTRY\x00REPO\x00DIGEST"
// (or TAG), so that clients' names never become paths. A manifest file is
//
//	"damselfly manifest v1\n"
//	header: JSON {"registry","repo","digest","media_type"}, then "\n"
//	  (at most maxHeader bytes)
//	body: the manifest's bytes as the registry sent them (at most MaxSize)
//
// and a tag file is "damselfly tag v1\n" then JSON {"registry","repo",
// "tag","digest","at"} ("at": when it was resolved, RFC 3339). Files are
// written to a temporary name, synced and renamed into place. A manifest
// file's modification time is its last use, which orders eviction
// (least recently used first) across restarts.
package manifests

import (
	"bufio"
	"bytes"
	"container/list"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"
)

// MaxSize bounds a manifest kept: 4 MiB, the limit registries put on a
// manifest (the OCI distribution spec's suggestion).
const MaxSize = 4 << 20

// Limits of the format, checked before reading.
const (
	maxHeader  = 4 << 10
	maxTagFile = 4 << 10
	magicM     = "damselfly manifest v1\n"
	magicT     = "damselfly tag v1\n"
)

// Defaults of Options.
const (
	DefaultMaxEntries = 4096
	DefaultMaxBytes   = 256 << 20
)

// ErrNotFound: the store holds no such manifest or tag.
var ErrNotFound = errors.New("manifest not in the node's store")

// ErrCorrupt: a stored file failed verification; it has been removed.
var ErrCorrupt = errors.New("stored manifest corrupt")

// Manifest is a manifest or index as the registry served it.
type Manifest struct {
	MediaType string // the registry's Content-Type
	Digest    string // "sha256:HEX" of Body
	Body      []byte
}

// Options bound a Store. Zero fields take the defaults.
type Options struct {
	// MaxEntries and MaxBytes bound the manifests kept (body bytes);
	// the least recently used go first. Tags kept are bounded to
	// 4*MaxEntries, the oldest resolutions going first.
	MaxEntries int
	MaxBytes   int64
	// Now is the clock of tag resolutions; nil means time.Now.
	Now func() time.Time
	// Log gets a line per damaged file dropped; nil discards.
	Log *slog.Logger
}

// Hooks hear of what the store comes to hold and stops holding, by Name,
// so that peers can be told (peer/manifestshare). They are called
// without the store's lock held, and must not block.
type Hooks struct {
	Added   func(name string) // a manifest or a tag resolution was kept
	Dropped func(name string) // one was evicted, dropped as damaged or forgotten
}

// Store is a directory of manifests and tag resolutions.
type Store struct {
	dir  string
	opts Options

	mu    sync.Mutex
	lru   *list.List               // of *entry, most recently used first
	byKey map[string]*list.Element // file name -> element
	bytes int64
	tags  map[string]Tag // file name -> resolution
	// refs counts, by Name(registry, repo, blob digest), the manifests
	// held that reference the blob (config and layers).
	refs      map[string]int
	unindexed int // entries not indexed yet
	hooks     Hooks
	// tagMu orders KeepTag's check-then-write, so that an older
	// resolution never overwrites a younger one.
	tagMu sync.Mutex
	// gone are names removed under mu, for the Dropped hook once mu is
	// released (unlock).
	gone []string
}

type entry struct {
	name string
	size int64
	// refs are the Names of the blobs the manifest references, counted
	// in Store.refs; indexed says they are (entries found on disk at
	// Open are indexed at the first References).
	refs    []string
	indexed bool
}

// Tag is a tag's last resolution.
type Tag struct {
	Registry string    `json:"registry"`
	Repo     string    `json:"repo"`
	Tag      string    `json:"tag"`
	Digest   string    `json:"digest"`
	At       time.Time `json:"at"`
}

type header struct {
	Registry  string `json:"registry"`
	Repo      string `json:"repo"`
	Digest    string `json:"digest"`
	MediaType string `json:"media_type"`
}

// Open opens (creating) the store in dir and indexes what it holds:
// manifest files by size and age, tag files read and checked (damaged
// ones removed). Manifest bodies are verified when read, not here.
func Open(dir string, opts Options) (*Store, error) {
	if opts.MaxEntries <= 0 {
		opts.MaxEntries = DefaultMaxEntries
	}
	if opts.MaxBytes <= 0 {
		opts.MaxBytes = DefaultMaxBytes
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	s := &Store{dir: dir, opts: opts, lru: list.New(), byKey: map[string]*list.Element{}, tags: map[string]Tag{}, refs: map[string]int{}}
	for _, sub := range []string{"m", "t"} {
		if err := os.MkdirAll(filepath.Join(dir, sub), 0o700); err != nil {
			return nil, fmt.Errorf("manifest store: %w", err)
		}
	}
	if err := s.load(); err != nil {
		return nil, err
	}
	return s, nil
}

// load indexes the files on disk, dropping what cannot be ours.
func (s *Store) load() error {
	type found struct {
		name string
		size int64
		mod  time.Time
	}
	ents, err := os.ReadDir(filepath.Join(s.dir, "m"))
	if err != nil {
		return fmt.Errorf("manifest store: %w", err)
	}
	var fs []found
	for _, de := range ents {
		p := filepath.Join(s.dir, "m", de.Name())
		fi, err := de.Info()
		if err != nil || !validName(de.Name()) || !fi.Mode().IsRegular() || fi.Size() > int64(len(magicM)+maxHeader+MaxSize) {
			os.RemoveAll(p)
			continue
		}
		fs = append(fs, found{de.Name(), fi.Size(), fi.ModTime()})
	}
	// Oldest use last, so that the list is most recent first.
	slices.SortFunc(fs, func(a, b found) int { return b.mod.Compare(a.mod) })
	for _, f := range fs {
		s.byKey[f.name] = s.lru.PushBack(&entry{name: f.name, size: f.size})
		s.bytes += f.size
		s.unindexed++
	}
	ents, err = os.ReadDir(filepath.Join(s.dir, "t"))
	if err != nil {
		return fmt.Errorf("manifest store: %w", err)
	}
	for _, de := range ents {
		p := filepath.Join(s.dir, "t", de.Name())
		t, err := readTag(p)
		if err != nil || de.Name() != Name(t.Registry, t.Repo, t.Tag) {
			s.opts.Log.Warn("manifest store: dropping a damaged tag file", "file", p, "err", err)
			os.RemoveAll(p)
			continue
		}
		s.tags[de.Name()] = t
	}
	s.mu.Lock()
	defer s.unlock()
	s.evictLocked()
	return nil
}

func readTag(p string) (Tag, error) {
	var t Tag
	f, err := os.Open(p)
	if err != nil {
		return t, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxTagFile+1))
	if err != nil {
		return t, err
	}
	rest, ok := bytes.CutPrefix(b, []byte(magicT))
	if !ok || len(b) > maxTagFile {
		return t, errors.New("not a tag file")
	}
	if err := json.Unmarshal(rest, &t); err != nil {
		return t, err
	}
	if !validDigest(t.Digest) {
		return t, fmt.Errorf("bad digest %q", t.Digest)
	}
	return t, nil
}

// Name names (registry, repo, digest or tag): its file in the store, and
// how peers and hooks speak of it. Clients' names never become paths.
func Name(registry, repo, object string) string {
	h := sha256.Sum256([]byte(registry + "\x00" + repo + "\x00" + object))
	return hex.EncodeToString(h[:])
}

func validName(n string) bool {
	if len(n) != 64 {
		return false
	}
	_, err := hex.DecodeString(n)
	return err == nil
}

// validDigest accepts "sha256:" and 64 lower-case hex digits, the only
// digests the store keeps.
func validDigest(d string) bool {
	h, ok := bytes.CutPrefix([]byte(d), []byte("sha256:"))
	if !ok || len(h) != 64 {
		return false
	}
	for _, c := range h {
		if !(c >= '0' && c <= '9' || c >= 'a' && c <= 'f') {
			return false
		}
	}
	return true
}

// Digest is the "sha256:HEX" digest of b.
func Digest(b []byte) string {
	h := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(h[:])
}

// Put keeps m as a manifest of repo at registry. It refuses (an error,
// nothing kept) a body over MaxSize or one whose sha256 is not m.Digest.
func (s *Store) Put(registry, repo string, m Manifest) error {
	if len(m.Body) > MaxSize {
		return fmt.Errorf("manifest %s: %d bytes is over %d", m.Digest, len(m.Body), MaxSize)
	}
	if got := Digest(m.Body); got != m.Digest {
		return fmt.Errorf("manifest %s: body has digest %s", m.Digest, got)
	}
	hdr, err := json.Marshal(header{registry, repo, m.Digest, m.MediaType})
	if err != nil {
		return err
	}
	if len(hdr)+1 > maxHeader {
		return fmt.Errorf("manifest %s: header of %d bytes is over %d", m.Digest, len(hdr)+1, maxHeader)
	}
	var buf bytes.Buffer
	buf.WriteString(magicM)
	buf.Write(hdr)
	buf.WriteByte('\n')
	buf.Write(m.Body)
	name := Name(registry, repo, m.Digest)
	if err := writeAtomic(filepath.Join(s.dir, "m"), name, buf.Bytes()); err != nil {
		return fmt.Errorf("manifest %s: %w", m.Digest, err)
	}
	refs := blobRefs(registry, repo, m.Body)
	s.mu.Lock()
	if el, ok := s.byKey[name]; ok {
		s.forgetLocked(el) // replaced by the file just written
	}
	s.byKey[name] = s.lru.PushFront(&entry{name: name, size: int64(buf.Len()), refs: refs, indexed: true})
	s.bytes += int64(buf.Len())
	for _, r := range refs {
		s.refs[r]++
	}
	s.evictLocked()
	kept := s.byKey[name] != nil
	s.unlock()
	if kept {
		s.added(name)
	}
	return nil
}

// Get returns the manifest digest of repo at registry, verified: its
// file names it and its body has that digest. A file that fails is
// removed and ErrCorrupt returned.
func (s *Store) Get(registry, repo, digest string) (Manifest, error) {
	name := Name(registry, repo, digest)
	s.mu.Lock()
	el, ok := s.byKey[name]
	if ok {
		s.lru.MoveToFront(el)
	}
	s.mu.Unlock()
	if !ok {
		return Manifest{}, ErrNotFound
	}
	p := filepath.Join(s.dir, "m", name)
	m, err := readManifest(p, registry, repo, digest)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			s.opts.Log.Warn("manifest store: dropping a damaged manifest", "digest", digest, "repo", repo, "err", err)
			err = fmt.Errorf("%w: %s: %w", ErrCorrupt, digest, err)
		} else {
			err = ErrNotFound
		}
		s.drop(name)
		return Manifest{}, err
	}
	now := time.Now()
	_ = os.Chtimes(p, now, now) // the use orders eviction after a restart
	return m, nil
}

func readManifest(p, registry, repo, digest string) (Manifest, error) {
	h, body, err := readFile(p)
	if err != nil {
		return Manifest{}, err
	}
	if h.Registry != registry || h.Repo != repo || h.Digest != digest {
		return Manifest{}, fmt.Errorf("file holds %s of %s at %s", h.Digest, h.Repo, h.Registry)
	}
	return Manifest{MediaType: h.MediaType, Digest: digest, Body: body}, nil
}

// readFile reads a manifest file and checks its body against the digest
// its header names.
func readFile(p string) (header, []byte, error) {
	var h header
	f, err := os.Open(p)
	if err != nil {
		return h, nil, err
	}
	defer f.Close()
	br := bufio.NewReaderSize(io.LimitReader(f, int64(len(magicM)+maxHeader+MaxSize+1)), 4096)
	magic := make([]byte, len(magicM))
	if _, err := io.ReadFull(br, magic); err != nil || string(magic) != magicM {
		return h, nil, errors.New("not a manifest file")
	}
	line, err := br.ReadSlice('\n')
	if err != nil {
		return h, nil, fmt.Errorf("header: %w", err)
	}
	if err := json.Unmarshal(line, &h); err != nil {
		return h, nil, fmt.Errorf("header: %w", err)
	}
	body, err := io.ReadAll(br)
	if err != nil {
		return h, nil, err
	}
	if len(body) > MaxSize {
		return h, nil, errors.New("body over the limit")
	}
	if got := Digest(body); got != h.Digest {
		return h, nil, fmt.Errorf("body has digest %s", got)
	}
	return h, body, nil
}

// drop forgets and removes the manifest file name.
func (s *Store) drop(name string) {
	s.mu.Lock()
	defer s.unlock()
	if el, ok := s.byKey[name]; ok {
		s.removeLocked(el)
	}
}

func (s *Store) removeLocked(el *list.Element) {
	name := s.forgetLocked(el)
	os.Remove(filepath.Join(s.dir, "m", name))
	s.gone = append(s.gone, name)
}

// forgetLocked takes el out of the index and returns its name.
func (s *Store) forgetLocked(el *list.Element) string {
	e := el.Value.(*entry)
	s.lru.Remove(el)
	delete(s.byKey, e.name)
	s.bytes -= e.size
	if !e.indexed {
		s.unindexed--
	}
	for _, r := range e.refs {
		if s.refs[r]--; s.refs[r] <= 0 {
			delete(s.refs, r)
		}
	}
	return e.name
}

// blobRefs returns the Names of the blobs (config and layers) that the
// manifest body references in repo at registry. An index references
// manifests, not blobs; a body that is not JSON references nothing.
func blobRefs(registry, repo string, body []byte) []string {
	var m struct {
		Config *struct {
			Digest string `json:"digest"`
		} `json:"config"`
		Layers []struct {
			Digest string `json:"digest"`
		} `json:"layers"`
	}
	if json.Unmarshal(body, &m) != nil {
		return nil
	}
	var out []string
	if m.Config != nil && validDigest(m.Config.Digest) {
		out = append(out, Name(registry, repo, m.Config.Digest))
	}
	for _, l := range m.Layers {
		if validDigest(l.Digest) {
			out = append(out, Name(registry, repo, l.Digest))
		}
	}
	return out
}

// References reports whether a manifest held of repo at registry
// references blob digest (as its config or a layer): the registry served
// that manifest, verified, from that repository, so the blob is part of
// it.
func (s *Store) References(registry, repo, digest string) bool {
	s.index()
	s.mu.Lock()
	defer s.unlock()
	return s.refs[Name(registry, repo, digest)] > 0
}

// index reads the manifests found on disk at Open that are not indexed
// yet, once, outside the lock (a file that fails is dropped as Get
// would).
func (s *Store) index() {
	s.mu.Lock()
	if s.unindexed == 0 {
		s.mu.Unlock()
		return
	}
	var todo []string
	for n, el := range s.byKey {
		if !el.Value.(*entry).indexed {
			todo = append(todo, n)
		}
	}
	s.mu.Unlock()
	for _, n := range todo {
		h, body, err := readFile(filepath.Join(s.dir, "m", n))
		if err == nil && Name(h.Registry, h.Repo, h.Digest) != n {
			err = errors.New("file holds another manifest than its name says")
		}
		var refs []string
		if err == nil {
			refs = blobRefs(h.Registry, h.Repo, body)
		}
		s.mu.Lock()
		el, ok := s.byKey[n]
		switch {
		case !ok || el.Value.(*entry).indexed:
		case err != nil:
			s.opts.Log.Warn("manifest store: dropping a damaged manifest", "file", n, "err", err)
			s.removeLocked(el)
		default:
			e := el.Value.(*entry)
			e.refs, e.indexed = refs, true
			s.unindexed--
			for _, r := range refs {
				s.refs[r]++
			}
		}
		s.unlock()
	}
}

// unlock releases mu, then tells the Dropped hook what went while it
// was held.
func (s *Store) unlock() {
	gone, dropped := s.gone, s.hooks.Dropped
	s.gone = nil
	s.mu.Unlock()
	if dropped != nil {
		for _, n := range gone {
			dropped(n)
		}
	}
}

// added tells the Added hook of name.
func (s *Store) added(name string) {
	s.mu.Lock()
	f := s.hooks.Added
	s.mu.Unlock()
	if f != nil {
		f(name)
	}
}

// SetHooks sets the hooks (zero Hooks: none).
func (s *Store) SetHooks(h Hooks) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.hooks = h
}

// Names returns the Name of every manifest and tag resolution held.
func (s *Store) Names() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]string, 0, len(s.byKey)+len(s.tags))
	for n := range s.byKey {
		out = append(out, n)
	}
	for n := range s.tags {
		out = append(out, n)
	}
	return out
}

// evictLocked brings the store within its bounds.
func (s *Store) evictLocked() {
	for s.lru.Len() > 0 && (s.lru.Len() > s.opts.MaxEntries || s.bytes > s.opts.MaxBytes) {
		s.removeLocked(s.lru.Back())
	}
	maxTags := 4 * s.opts.MaxEntries
	if len(s.tags) <= maxTags {
		return
	}
	names := make([]string, 0, len(s.tags))
	for n := range s.tags {
		names = append(names, n)
	}
	slices.SortFunc(names, func(a, b string) int { return s.tags[a].At.Compare(s.tags[b].At) })
	for _, n := range names[:len(names)-maxTags] {
		delete(s.tags, n)
		os.Remove(filepath.Join(s.dir, "t", n))
		s.gone = append(s.gone, n)
	}
}

// SetTag records that tag of repo at registry resolved to digest now.
func (s *Store) SetTag(registry, repo, tag, digest string) error {
	_, err := s.KeepTag(Tag{Registry: registry, Repo: repo, Tag: tag, Digest: digest, At: s.opts.Now().UTC()})
	return err
}

// KeepTag records the resolution t (a peer's, with the time it was made)
// unless the store holds a younger one of the same tag; it says whether
// t was kept.
func (s *Store) KeepTag(t Tag) (bool, error) {
	if !validDigest(t.Digest) {
		return false, fmt.Errorf("tag %s: digest %q not kept", t.Tag, t.Digest)
	}
	t.At = t.At.UTC()
	name := Name(t.Registry, t.Repo, t.Tag)
	s.tagMu.Lock()
	defer s.tagMu.Unlock()
	s.mu.Lock()
	old, had := s.tags[name]
	s.mu.Unlock()
	if had && !t.At.After(old.At) {
		return false, nil
	}
	b, err := json.Marshal(t)
	if err != nil {
		return false, err
	}
	if len(magicT)+len(b) > maxTagFile {
		return false, fmt.Errorf("tag %s: record over %d bytes", t.Tag, maxTagFile)
	}
	if err := writeAtomic(filepath.Join(s.dir, "t"), name, append([]byte(magicT), b...)); err != nil {
		return false, fmt.Errorf("tag %s: %w", t.Tag, err)
	}
	s.mu.Lock()
	s.tags[name] = t
	s.evictLocked()
	_, kept := s.tags[name]
	s.unlock()
	if kept {
		s.added(name)
	}
	return kept, nil
}

// Tag returns tag's last recorded resolution in repo at registry.
func (s *Store) Tag(registry, repo, tag string) (Tag, bool) {
	s.mu.Lock()
	defer s.unlock()
	t, ok := s.tags[Name(registry, repo, tag)]
	return t, ok
}

// DropTag forgets tag (the registry said it is gone).
func (s *Store) DropTag(registry, repo, tag string) {
	name := Name(registry, repo, tag)
	s.mu.Lock()
	defer s.unlock()
	if _, ok := s.tags[name]; ok {
		delete(s.tags, name)
		os.Remove(filepath.Join(s.dir, "t", name))
		s.gone = append(s.gone, name)
	}
}

// Stats is what the store holds.
type Stats struct {
	Manifests int
	Bytes     int64 // file bytes of the manifests
	Tags      int
}

// Stats returns what the store holds.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	defer s.unlock()
	return Stats{Manifests: s.lru.Len(), Bytes: s.bytes, Tags: len(s.tags)}
}

// writeAtomic writes b as dir/name: a temporary file, synced, renamed.
func writeAtomic(dir, name string, b []byte) error {
	f, err := os.CreateTemp(dir, ".tmp-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(dir, name))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
