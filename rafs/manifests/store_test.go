package manifests

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"
)

func manifest(i int) Manifest {
	body := fmt.Appendf(nil, `{"schemaVersion":2,"n":%d,"pad":"%s"}`, i, bytes.Repeat([]byte("x"), 100))
	return Manifest{MediaType: "application/vnd.oci.image.manifest.v1+json", Digest: Digest(body), Body: body}
}

func TestPutGetReopen(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	clk := time.Unix(1_800_000_000, 0)
	s, err := Open(dir, Options{Now: func() time.Time { return clk }})
	if err != nil {
		t.Fatal(err)
	}
	m := manifest(1)
	if err := s.Put("https://r", "team/app", m); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTag("https://r", "team/app", "v1", m.Digest); err != nil {
		t.Fatal(err)
	}
	bad := manifest(2)
	bad.Digest = manifest(3).Digest
	if err := s.Put("https://r", "team/app", bad); err == nil {
		t.Error("Put of a body that is not its digest: got nil, want an error")
	}
	if _, err := s.Get("https://r", "team/app", bad.Digest); !errors.Is(err, ErrNotFound) {
		t.Errorf("Get of the refused body: got %v, want ErrNotFound", err)
	}
	for _, other := range [][2]string{{"https://r", "team/other"}, {"https://q", "team/app"}} {
		if _, err := s.Get(other[0], other[1], m.Digest); !errors.Is(err, ErrNotFound) {
			t.Errorf("Get from %s %s: got %v, want ErrNotFound (kept per registry and repository)", other[0], other[1], err)
		}
	}

	s2, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := s2.Get("https://r", "team/app", m.Digest)
	if err != nil || !bytes.Equal(got.Body, m.Body) || got.MediaType != m.MediaType {
		t.Fatalf("after reopening: got %q %q, %v; want the manifest", got.MediaType, got.Body, err)
	}
	tag, ok := s2.Tag("https://r", "team/app", "v1")
	if !ok || tag.Digest != m.Digest || !tag.At.Equal(clk) {
		t.Errorf("tag after reopening: got %+v, %v; want %s at %v", tag, ok, m.Digest, clk)
	}
	s2.DropTag("https://r", "team/app", "v1")
	s3, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := s3.Tag("https://r", "team/app", "v1"); ok {
		t.Error("a dropped tag came back after reopening")
	}
}

// TestCorruptFiles damages a stored manifest in each way a disk or an
// intruder could, and checks that Get refuses it and removes it.
func TestCorruptFiles(t *testing.T) {
	t.Parallel()
	m := manifest(1)
	other := manifest(2)
	for _, tt := range []struct {
		name   string
		damage func(b []byte) []byte
	}{
		{"body byte flipped", func(b []byte) []byte { b[len(b)-5] ^= 1; return b }},
		{"body truncated", func(b []byte) []byte { return b[:len(b)-3] }},
		{"empty", func([]byte) []byte { return nil }},
		{"bad magic", func(b []byte) []byte { b[0] = 'D'; return b }},
		{"header not JSON", func(b []byte) []byte { return append([]byte(magicM+"{nope\n"), m.Body...) }},
		{"header names another repository", func(b []byte) []byte {
			return bytes.Replace(b, []byte(`"team/app"`), []byte(`"team/xyz"`), 1)
		}},
		{"another manifest under this name", func(b []byte) []byte {
			return append(bytes.Replace(b[:bytes.IndexByte(b[len(magicM):], '\n')+len(magicM)+1], []byte(m.Digest), []byte(other.Digest), 1), other.Body...)
		}},
		{"no header end", func(b []byte) []byte { return append([]byte(magicM), bytes.Repeat([]byte("{"), maxHeader+10)...) }},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			dir := t.TempDir()
			s, err := Open(dir, Options{})
			if err != nil {
				t.Fatal(err)
			}
			if err := s.Put("https://r", "team/app", m); err != nil {
				t.Fatal(err)
			}
			p := filepath.Join(dir, "m", Name("https://r", "team/app", m.Digest))
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			for _, st := range []*Store{s, reopen(t, dir)} {
				if err := st.Put("https://r", "team/app", m); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(p, tt.damage(bytes.Clone(b)), 0o600); err != nil {
					t.Fatal(err)
				}
				got, err := st.Get("https://r", "team/app", m.Digest)
				if !errors.Is(err, ErrCorrupt) || got.Body != nil {
					t.Fatalf("got %d bytes, %v; want ErrCorrupt and nothing", len(got.Body), err)
				}
				if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
					t.Errorf("damaged file still there: %v", err)
				}
				if _, err := st.Get("https://r", "team/app", m.Digest); !errors.Is(err, ErrNotFound) {
					t.Errorf("second Get: got %v, want ErrNotFound", err)
				}
				if n := st.Stats().Manifests; n != 0 {
					t.Errorf("Stats: %d manifests, want 0", n)
				}
			}
		})
	}
}

func reopen(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// Files that are not the store's, and damaged tag files, are removed
// when it opens.
func TestOpenDropsStrangers(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	s := reopen(t, dir)
	m := manifest(1)
	if err := s.SetTag("https://r", "a", "v1", m.Digest); err != nil {
		t.Fatal(err)
	}
	if err := s.SetTag("https://r", "a", "v2", m.Digest); err != nil {
		t.Fatal(err)
	}
	// v2's record moved under v1's name: a tag file must be named for
	// what it holds.
	v1 := filepath.Join(dir, "t", Name("https://r", "a", "v1"))
	v2 := filepath.Join(dir, "t", Name("https://r", "a", "v2"))
	b, _ := os.ReadFile(v2)
	os.WriteFile(v1, b, 0o600)
	os.WriteFile(filepath.Join(dir, "m", ".tmp-123"), []byte("half"), 0o600)
	os.WriteFile(filepath.Join(dir, "t", "junk"), []byte("junk"), 0o600)
	s = reopen(t, dir)
	if _, ok := s.Tag("https://r", "a", "v1"); ok {
		t.Error("a tag file holding another tag was used")
	}
	if tg, ok := s.Tag("https://r", "a", "v2"); !ok || tg.Digest != m.Digest {
		t.Errorf("the good tag file: got %+v, %v", tg, ok)
	}
	for _, p := range []string{v1, filepath.Join(dir, "m", ".tmp-123"), filepath.Join(dir, "t", "junk")} {
		if _, err := os.Stat(p); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s not removed: %v", filepath.Base(p), err)
		}
	}
}

func TestBounds(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	size := int64(len(magicM)) + 200 // about one file
	s, err := Open(dir, Options{MaxEntries: 3, MaxBytes: 100 * size})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 3 {
		if err := s.Put("https://r", "a", manifest(i)); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.Get("https://r", "a", manifest(0).Digest); err != nil { // 0 is now the most recent
		t.Fatal(err)
	}
	if err := s.Put("https://r", "a", manifest(3)); err != nil {
		t.Fatal(err)
	}
	want := map[int]bool{0: true, 1: false, 2: true, 3: true}
	for i, kept := range want {
		_, err := s.Get("https://r", "a", manifest(i).Digest)
		if (err == nil) != kept {
			t.Errorf("manifest %d: Get error %v, want kept=%v (least recently used goes first)", i, err, kept)
		}
	}
	if n := s.Stats().Manifests; n != 3 {
		t.Errorf("%d manifests kept, want 3", n)
	}
	files, _ := os.ReadDir(filepath.Join(dir, "m"))
	if len(files) != 3 {
		t.Errorf("%d files on disk, want 3", len(files))
	}

	// Bytes: a bound of about two files keeps two.
	b, err := Open(t.TempDir(), Options{MaxBytes: 2*s.Stats().Bytes/3 + 10})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := b.Put("https://r", "a", manifest(i)); err != nil {
			t.Fatal(err)
		}
	}
	if st := b.Stats(); st.Manifests != 2 || st.Bytes > 2*s.Stats().Bytes/3+10 {
		t.Errorf("byte bound: got %+v, want 2 manifests within the bound", st)
	}
	// A restart with a smaller bound evicts down to it.
	if st := reopenWith(t, dir, Options{MaxEntries: 1}).Stats(); st.Manifests != 1 {
		t.Errorf("reopened with MaxEntries 1: %d manifests, want 1", st.Manifests)
	}

	// Tags: at most 4*MaxEntries, the oldest resolutions go first.
	clk := time.Unix(1_800_000_000, 0)
	tg, err := Open(t.TempDir(), Options{MaxEntries: 1, Now: func() time.Time { return clk }})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		clk = clk.Add(time.Second)
		if err := tg.SetTag("https://r", "a", fmt.Sprint("v", i), manifest(0).Digest); err != nil {
			t.Fatal(err)
		}
	}
	if st := tg.Stats(); st.Tags != 4 {
		t.Errorf("%d tags kept, want 4", st.Tags)
	}
	if _, ok := tg.Tag("https://r", "a", "v0"); ok {
		t.Error("the oldest tag was kept")
	}
	if _, ok := tg.Tag("https://r", "a", "v5"); !ok {
		t.Error("the newest tag was evicted")
	}
	if err := tg.Put("https://r", "a", Manifest{Digest: Digest(make([]byte, MaxSize+1)), Body: make([]byte, MaxSize+1)}); err == nil {
		t.Error("a manifest over MaxSize was kept")
	}
}

func reopenWith(t *testing.T, dir string, o Options) *Store {
	t.Helper()
	s, err := Open(dir, o)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func TestKeepTagKeepsTheYoungest(t *testing.T) {
	st, err := Open(t.TempDir(), Options{})
	if err != nil {
		t.Fatal(err)
	}
	var added, dropped []string
	st.SetHooks(Hooks{
		Added:   func(n string) { added = append(added, n) },
		Dropped: func(n string) { dropped = append(dropped, n) },
	})
	d1, d2 := Digest([]byte("one")), Digest([]byte("two"))
	at := time.Date(2026, 12, 4, 10, 0, 0, 0, time.UTC)
	if ok, err := st.KeepTag(Tag{Registry: "r", Repo: "a", Tag: "v1", Digest: d1, At: at}); !ok || err != nil {
		t.Fatalf("first resolution: kept %v, %v", ok, err)
	}
	if ok, err := st.KeepTag(Tag{Registry: "r", Repo: "a", Tag: "v1", Digest: d2, At: at.Add(-time.Minute)}); ok || err != nil {
		t.Fatalf("older resolution: kept %v, %v; want not kept", ok, err)
	}
	if got, _ := st.Tag("r", "a", "v1"); got.Digest != d1 || !got.At.Equal(at) {
		t.Fatalf("after an older one: %+v, want %s at %v", got, d1, at)
	}
	if ok, err := st.KeepTag(Tag{Registry: "r", Repo: "a", Tag: "v1", Digest: d2, At: at.Add(time.Minute)}); !ok || err != nil {
		t.Fatalf("younger resolution: kept %v, %v", ok, err)
	}
	if got, _ := st.Tag("r", "a", "v1"); got.Digest != d2 {
		t.Fatalf("after a younger one: %+v, want %s", got, d2)
	}
	name := Name("r", "a", "v1")
	if len(added) != 2 || added[0] != name || added[1] != name {
		t.Fatalf("Added heard %v, want %s twice", added, name)
	}
	if _, err := st.KeepTag(Tag{Registry: "r", Repo: "a", Tag: "v2", Digest: "sha256:bad", At: at}); err == nil {
		t.Fatal("a bad digest was kept")
	}
	st.DropTag("r", "a", "v1")
	if len(dropped) != 1 || dropped[0] != name {
		t.Fatalf("Dropped heard %v, want %s", dropped, name)
	}
	if n := st.Names(); len(n) != 0 {
		t.Fatalf("Names after dropping every tag: %v", n)
	}
}

func TestHooksHearManifestsKeptAndEvicted(t *testing.T) {
	st, err := Open(t.TempDir(), Options{MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	var added, dropped []string
	st.SetHooks(Hooks{
		Added:   func(n string) { added = append(added, n) },
		Dropped: func(n string) { dropped = append(dropped, n) },
	})
	m1 := Manifest{Digest: Digest([]byte("{1}")), Body: []byte("{1}")}
	m2 := Manifest{Digest: Digest([]byte("{2}")), Body: []byte("{2}")}
	for _, m := range []Manifest{m1, m2} {
		if err := st.Put("r", "a", m); err != nil {
			t.Fatal(err)
		}
	}
	n1, n2 := Name("r", "a", m1.Digest), Name("r", "a", m2.Digest)
	if !slices.Equal(added, []string{n1, n2}) || !slices.Equal(dropped, []string{n1}) {
		t.Fatalf("added %v dropped %v; want [%s %s] and [%s]", added, dropped, n1, n2, n1)
	}
	if got := st.Names(); !slices.Equal(got, []string{n2}) {
		t.Fatalf("Names %v, want [%s]", got, n2)
	}
}

func TestReferences(t *testing.T) {
	dir := t.TempDir()
	st, err := Open(dir, Options{MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	cfg, l1, l2 := Digest([]byte("config")), Digest([]byte("layer1")), Digest([]byte("layer2"))
	body := fmt.Appendf(nil, `{"schemaVersion":2,"config":{"digest":%q},"layers":[{"digest":%q},{"digest":%q},{"digest":"sha256:short"}]}`, cfg, l1, l2)
	m := Manifest{Digest: Digest(body), Body: body}
	if err := st.Put("r", "a", m); err != nil {
		t.Fatal(err)
	}
	check := func(st *Store, when string, want bool) {
		t.Helper()
		for _, d := range []string{cfg, l1, l2} {
			if got := st.References("r", "a", d); got != want {
				t.Errorf("%s: References(r, a, %s) = %v, want %v", when, d, got, want)
			}
			if st.References("r", "b", d) {
				t.Errorf("%s: a blob of repository a counted for repository b", when)
			}
		}
		if st.References("r", "a", Digest([]byte("other"))) || st.References("r", "a", m.Digest) {
			t.Errorf("%s: an unreferenced digest counted", when)
		}
	}
	check(st, "after Put", true)
	// Put again (the same manifest): still counted once.
	if err := st.Put("r", "a", m); err != nil {
		t.Fatal(err)
	}
	st2, err := Open(dir, Options{MaxEntries: 2})
	if err != nil {
		t.Fatal(err)
	}
	check(st2, "after reopening", true)
	// An index references no blob.
	idx := []byte(fmt.Sprintf(`{"schemaVersion":2,"manifests":[{"digest":%q}]}`, l1))
	if err := st2.Put("r", "i", Manifest{Digest: Digest(idx), Body: idx}); err != nil {
		t.Fatal(err)
	}
	if st2.References("r", "i", l1) {
		t.Error("an index's manifest counted as a blob")
	}
	// Evicted: no longer referenced.
	for i := range 2 {
		if err := st2.Put("r", "x", manifest(i)); err != nil {
			t.Fatal(err)
		}
	}
	check(st2, "after eviction", false)
}

// A manifest put twice is counted once: evicting it forgets its blobs.
func TestReferencesPutTwice(t *testing.T) {
	st, err := Open(t.TempDir(), Options{MaxEntries: 1})
	if err != nil {
		t.Fatal(err)
	}
	l := Digest([]byte("layer"))
	body := fmt.Appendf(nil, `{"layers":[{"digest":%q}]}`, l)
	m := Manifest{Digest: Digest(body), Body: body}
	for range 2 {
		if err := st.Put("r", "a", m); err != nil {
			t.Fatal(err)
		}
	}
	if !st.References("r", "a", l) {
		t.Fatal("not referenced after Put")
	}
	if err := st.Put("r", "a", manifest(7)); err != nil {
		t.Fatal(err)
	}
	if st.References("r", "a", l) {
		t.Fatal("still referenced after its manifest was evicted")
	}
}
