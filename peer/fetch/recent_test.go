package fetch

import (
	"crypto/sha256"
	"fmt"
	"slices"
	"testing"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
)

func TestRecent(t *testing.T) {
	r := newRecent()
	now := time.Unix(1700000000, 0)
	blob := rafs.Digest(sha256.Sum256([]byte("blob")))
	p1, p2, p3 := lpeer.ID("p1"), lpeer.ID("p2"), lpeer.ID("p3")
	r.learn(blob, lpeer.AddrInfo{ID: p1}, []uint32{1}, now)
	r.learn(blob, lpeer.AddrInfo{ID: p2}, []uint32{1, 2, 3}, now)
	r.learn(blob, lpeer.AddrInfo{ID: p3}, []uint32{9}, now)
	none := func(lpeer.ID) bool { return false }

	got := r.parents(blob, []uint32{1, 2, 3}, 2, now, none)
	if len(got) != 2 || got[0].ID != p2 || got[1].ID != p1 {
		t.Errorf("got %v, want p2 then p1 (by coverage)", got)
	}
	if got := r.parents(blob, []uint32{1}, 5, now, func(id lpeer.ID) bool { return id == p2 }); len(got) != 2 {
		t.Errorf("got %v, want 2 parents with p2 skipped", got)
	}
	if got := r.parents(blob, []uint32{1}, 5, now.Add(recentTTL+time.Second), none); len(got) != 0 {
		t.Errorf("got %v after the TTL, want none", got)
	}
	for i := range recentPerBlob + 3 {
		r.learn(blob, lpeer.AddrInfo{ID: lpeer.ID(fmt.Sprint("x", i))}, nil, now)
	}
	if got := r.parents(blob, nil, 100, now, none); len(got) != recentPerBlob {
		t.Errorf("remembered %d parents of a blob, want %d", len(got), recentPerBlob)
	}
	for i := range recentBlobs + 10 {
		r.learn(rafs.Digest(sha256.Sum256(fmt.Append(nil, i))), lpeer.AddrInfo{ID: p1}, []uint32{0}, now.Add(time.Duration(i)))
	}
	if n := len(r.blobs); n != recentBlobs {
		t.Errorf("remembered %d blobs, want %d", n, recentBlobs)
	}
}

// A blob without parents of its own, or with too few, is offered the
// parents learnt for other blobs, most recent first, after its own and
// without repeats, skipped or expired ones.
func TestRecentOtherBlobs(t *testing.T) {
	r := newRecent()
	now := time.Unix(1700000000, 0)
	layer := func(s string) rafs.Digest { return rafs.Digest(sha256.Sum256([]byte(s))) }
	a, b, c, d := lpeer.ID("a"), lpeer.ID("b"), lpeer.ID("c"), lpeer.ID("d")
	none := func(lpeer.ID) bool { return false }
	r.learn(layer("one"), lpeer.AddrInfo{ID: a}, []uint32{1}, now)
	r.learn(layer("one"), lpeer.AddrInfo{ID: b}, []uint32{1}, now.Add(time.Second))
	r.learn(layer("two"), lpeer.AddrInfo{ID: a}, []uint32{1}, now.Add(2*time.Second))
	r.learn(layer("two"), lpeer.AddrInfo{ID: c}, []uint32{1}, now.Add(-recentTTL)) // expired by now+3s
	r.learn(layer("three"), lpeer.AddrInfo{ID: d}, []uint32{7}, now)
	at := now.Add(3 * time.Second)

	ids := func(infos []lpeer.AddrInfo) []lpeer.ID {
		var out []lpeer.ID
		for _, i := range infos {
			out = append(out, i.ID)
		}
		return out
	}
	if got := ids(r.parents(layer("unknown"), []uint32{1}, 3, at, none)); !slices.Equal(got, []lpeer.ID{a, b, d}) {
		t.Errorf("unknown blob: got %v, want a, b, d (most recently learnt first)", got)
	}
	if got := ids(r.parents(layer("three"), []uint32{7}, 3, at, none)); !slices.Equal(got, []lpeer.ID{d, a, b}) {
		t.Errorf("blob three: got %v, want its own d first, then a, b", got)
	}
	if got := ids(r.parents(layer("three"), []uint32{7}, 1, at, none)); !slices.Equal(got, []lpeer.ID{d}) {
		t.Errorf("blob three, one wanted: got %v, want d", got)
	}
	if got := ids(r.parents(layer("unknown"), nil, 5, at, func(id lpeer.ID) bool { return id == a })); !slices.Equal(got, []lpeer.ID{b, d}) {
		t.Errorf("a skipped: got %v, want b, d", got)
	}
	if got := r.parents(layer("unknown"), nil, 5, now.Add(recentTTL+3*time.Second), none); len(got) != 0 {
		t.Errorf("after the TTL: got %v, want none", got)
	}
}
