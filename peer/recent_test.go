package peer

import (
	"crypto/sha256"
	"fmt"
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
