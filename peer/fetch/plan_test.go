package fetch

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
)

// Peers of the plan tests, named by one letter in the plans' text.
var (
	self  = lpeer.ID("self")
	peerA = lpeer.ID("A")
	peerB = lpeer.ID("B")
	peerC = lpeer.ID("C")
	peerD = lpeer.ID("D")
	peerE = lpeer.ID("E")
)

var planNow = time.Unix(1700000000, 0)

// chunksOf returns pending chunks of the given ordinals, 100 bytes each.
func chunksOf(ords ...uint32) []rafs.Chunk {
	out := make([]rafs.Chunk, len(ords))
	for i, o := range ords {
		out[i] = rafs.Chunk{Ordinal: o, CompressedSize: 100, Size: 100}
	}
	return out
}

func named(id lpeer.ID, ords ...uint32) route.Parent {
	return route.Parent{Info: lpeer.AddrInfo{ID: id}, Chunks: ords}
}

func sameBlob(id lpeer.ID, holds ...uint32) Known {
	return Known{Info: lpeer.AddrInfo{ID: id}, SameBlob: true, Holds: holds}
}

func otherBlob(id lpeer.ID) Known { return Known{Info: lpeer.AddrInfo{ID: id}} }

// String renders a plan for the tables: "A[0 1][2]" is a parent asked in
// two requests, "-C" a parent given back, "fb[5 6]>D,E+o" a fallback to
// recent parents then the origin, "o[7]" origin turns, "s[9]" stray
// turns, "w[8]@2s" chunks to wait for.
func (p Plan) String() string {
	var parts []string
	for _, a := range p.Parents {
		s := string(a.Named.Info.ID)
		for _, b := range a.Batches {
			s += fmt.Sprint(ordinalsOf(b))
		}
		parts = append(parts, s)
	}
	for _, id := range p.GiveBack {
		parts = append(parts, "-"+string(id))
	}
	if len(p.Fallback.Chunks) > 0 {
		var ids []string
		for _, a := range p.Fallback.Parents {
			ids = append(ids, string(a.ID))
		}
		s := fmt.Sprintf("fb%v>%s", p.Fallback.Chunks, strings.Join(ids, ","))
		if p.Fallback.Origin {
			s += "+o"
		}
		parts = append(parts, s)
	}
	if len(p.Origin) > 0 {
		parts = append(parts, fmt.Sprintf("o%v", ordinalsOf(p.Origin)))
	}
	if len(p.Stray) > 0 {
		parts = append(parts, fmt.Sprintf("s%v", p.Stray))
	}
	if p.Waited {
		parts = append(parts, fmt.Sprintf("w%v@%v", p.Wait, p.RetryAfter))
	}
	return strings.Join(parts, " ")
}

func TestDecide(t *testing.T) {
	t.Parallel()
	limits := Limits{MaxChunks: 64, MaxBytes: 1 << 20}
	tests := []struct {
		name    string
		pending []rafs.Chunk
		route   *route.Route
		avoid   map[lpeer.ID]time.Time
		recent  []Known
		hedge   bool
		limits  *Limits
		want    string
	}{{
		name:    "all chunks on one parent",
		pending: chunksOf(0, 1, 2),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0, 1, 2)}},
		want:    "A[0 1 2]",
	}, {
		name:    "spread over parents, each cut to the request limits",
		pending: chunksOf(0, 1, 2, 3, 4, 5),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0, 1, 2), named(peerB, 3, 4), named(peerC, 5)}},
		limits:  &Limits{MaxChunks: 2, MaxBytes: 1 << 20},
		want:    "A[0 1][2] B[3 4] C[5]",
	}, {
		name:    "request bytes bound a batch; a chunk over them goes alone",
		pending: append(chunksOf(0, 1), rafs.Chunk{Ordinal: 2, CompressedSize: 500, Size: 900}),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0, 1, 2)}},
		limits:  &Limits{MaxChunks: 64, MaxBytes: 250},
		want:    "A[0 1][2]",
	}, {
		name:    "parent asked only for its pending chunks, in ordinal order",
		pending: chunksOf(1, 3),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 3, 2, 1, 0)}},
		want:    "A[1 3]",
	}, {
		name:    "avoided parent given back, its chunks to recent parents then origin",
		pending: chunksOf(0, 1, 2),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0, 1), named(peerB, 2)}},
		avoid:   map[lpeer.ID]time.Time{peerA: planNow.Add(time.Minute)},
		recent:  []Known{sameBlob(peerB, 2), sameBlob(peerA, 0, 1), sameBlob(peerC, 1)},
		want:    "B[2] -A fb[0 1]>C,B+o",
	}, {
		name:    "avoided until now: still avoided",
		pending: chunksOf(0),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0)}},
		avoid:   map[lpeer.ID]time.Time{peerA: planNow},
		want:    "-A fb[0]>+o",
	}, {
		name:    "avoidance expired: asked again",
		pending: chunksOf(0),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0)}},
		avoid:   map[lpeer.ID]time.Time{peerA: planNow.Add(-time.Nanosecond)},
		want:    "A[0]",
	}, {
		name:    "self and empty assignments skipped",
		pending: chunksOf(0, 1),
		route:   &route.Route{Parents: []route.Parent{named(self, 0), named(peerA), named(peerB, 0, 1)}},
		want:    "B[0 1]",
	}, {
		name:    "no route: recent parents of the blob by coverage, then of other blobs, then origin",
		pending: chunksOf(0, 1, 2, 3),
		recent:  []Known{sameBlob(peerA, 0), sameBlob(peerB, 0, 1, 2), otherBlob(peerD), otherBlob(peerB), otherBlob(peerE)},
		want:    "fb[0 1 2 3]>B,A,D+o",
	}, {
		name:    "no route: avoided and self not asked; none known: origin alone",
		pending: chunksOf(5),
		recent:  []Known{sameBlob(peerA, 5), otherBlob(self)},
		avoid:   map[lpeer.ID]time.Time{peerA: planNow.Add(time.Hour)},
		want:    "fb[5]>+o",
	}, {
		name:    "origin turn only for the chunks granted and pending",
		pending: chunksOf(0, 1, 2),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0)}, Origin: []uint32{1, 7}, Wait: []route.Wait{{Chunks: []uint32{2}, RetryAfter: time.Second}}},
		want:    "A[0] o[1] s[7] w[2]@1s",
	}, {
		name:    "wait: the shortest retry, pending chunks only",
		pending: chunksOf(0, 1, 2),
		route: &route.Route{Wait: []route.Wait{
			{Chunks: []uint32{2, 9}, RetryAfter: 3 * time.Second},
			{Chunks: []uint32{0}, RetryAfter: time.Second},
			{Chunks: []uint32{1}, RetryAfter: 2 * time.Second},
		}},
		want: "w[0 1 2]@1s",
	}, {
		name:    "wait for nothing pending still says to wait",
		pending: chunksOf(0),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0)}, Wait: []route.Wait{{Chunks: []uint32{4}, RetryAfter: time.Second}}},
		want:    "A[0] w[]@1s",
	}, {
		name:    "empty pending: nothing to do",
		pending: nil,
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0)}, Origin: []uint32{1}},
		want:    "",
	}, {
		name:    "empty pending without a route: nothing to do",
		pending: nil,
		recent:  []Known{sameBlob(peerA, 0)},
		want:    "",
	}, {
		name:    "duplicate chunks: each fetched once, from the first place that names it",
		pending: chunksOf(0, 1, 2, 3),
		route: &route.Route{
			Parents: []route.Parent{named(peerA, 0, 1, 1), named(peerB, 1, 2)},
			Origin:  []uint32{2, 3, 3},
			Wait:    []route.Wait{{Chunks: []uint32{3, 0}, RetryAfter: time.Second}},
		},
		want: "A[0 1] B[2] o[3] w[]@1s",
	}, {
		name:    "hedge: the slow parent and avoided ones given back, not planned elsewhere; no waits",
		pending: chunksOf(0, 1, 2),
		route:   &route.Route{Parents: []route.Parent{named(peerA, 0), named(peerB, 1), named(peerC, 2)}, Wait: []route.Wait{{Chunks: []uint32{2}}}},
		avoid:   map[lpeer.ID]time.Time{peerB: planNow.Add(time.Minute)},
		recent:  []Known{sameBlob(peerD, 1)},
		hedge:   true,
		want:    "C[2] -A -B",
	}, {
		name:    "hedge without a route: one recent parent other than the slow one, no origin",
		pending: chunksOf(0, 1),
		recent:  []Known{sameBlob(peerA, 0, 1), sameBlob(peerB, 0), otherBlob(peerC)},
		hedge:   true,
		want:    "fb[0 1]>B",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			in := Input{Self: self, Route: tt.route, Pending: tt.pending, Avoid: tt.avoid, Now: planNow,
				Recent: tt.recent, Limits: limits}
			if tt.limits != nil {
				in.Limits = *tt.limits
			}
			if tt.hedge {
				in.Hedge, in.Slow = true, peerA
			}
			if got := decide(in).String(); got != tt.want {
				t.Errorf("got %q, want %q", got, tt.want)
			}
		})
	}
}

// TestDecideInvariants checks, over many random routes, what every plan
// keeps: each pending chunk is fetched from one place at most; a parent
// is asked only for pending chunks the Route named it for, never when
// it is avoided or this node; requests keep the limits; the origin gets
// only turns the Route granted; without a hedge every pending chunk the
// Route names (for a peer other than this node) is planned somewhere.
func TestDecideInvariants(t *testing.T) {
	t.Parallel()
	rng := rand.New(rand.NewPCG(7, 23))
	ids := []lpeer.ID{self, peerA, peerB, peerC, peerD, peerE}
	for trial := range 5000 {
		const n = 24
		var pending []rafs.Chunk
		isPending := map[uint32]bool{}
		for o := range uint32(n) {
			if rng.IntN(3) > 0 {
				pending = append(pending, rafs.Chunk{Ordinal: o, CompressedSize: uint32(1 + rng.IntN(300)), Size: uint32(1 + rng.IntN(300))})
				isPending[o] = true
			}
		}
		var rt route.Route
		namedBy := map[lpeer.ID]map[uint32]bool{}
		granted := map[uint32]bool{}
		inRoute := map[uint32]bool{}
		for o := range uint32(n) {
			if rng.IntN(5) == 0 {
				continue
			}
			switch k := rng.IntN(len(ids) + 2); {
			case k < len(ids):
				id := ids[k]
				// A chunk named for this node is asked again next round.
				inRoute[o] = id != self
				if namedBy[id] == nil {
					namedBy[id] = map[uint32]bool{}
					rt.Parents = append(rt.Parents, route.Parent{Info: lpeer.AddrInfo{ID: id}})
				}
				namedBy[id][o] = true
				for i := range rt.Parents {
					if rt.Parents[i].Info.ID == id {
						rt.Parents[i].Chunks = append(rt.Parents[i].Chunks, o)
					}
				}
			case k == len(ids):
				inRoute[o] = true
				rt.Origin = append(rt.Origin, o)
				granted[o] = true
			default:
				inRoute[o] = true
				rt.Wait = append(rt.Wait, route.Wait{Chunks: []uint32{o}, RetryAfter: time.Duration(rng.IntN(5)) * time.Second})
			}
		}
		avoid := map[lpeer.ID]time.Time{}
		for _, id := range ids[1:] {
			if rng.IntN(4) == 0 {
				avoid[id] = planNow.Add(time.Duration(rng.IntN(3)-1) * time.Second)
			}
		}
		in := Input{Self: self, Route: &rt, Pending: pending, Avoid: avoid, Now: planNow,
			Limits: Limits{MaxChunks: 1 + rng.IntN(4), MaxBytes: int64(100 + rng.IntN(600))}, Hedge: rng.IntN(4) == 0, Slow: peerB}
		if rng.IntN(5) == 0 {
			in.Route = nil
		}
		p := decide(in)
		avoided := func(id lpeer.ID) bool {
			until, ok := avoid[id]
			return id == self || (in.Hedge && id == in.Slow) || ok && !planNow.After(until)
		}
		seen := map[uint32]string{}
		once := func(o uint32, where string) {
			if !isPending[o] {
				t.Fatalf("trial %d: %s has chunk %d, which is not pending: %v", trial, where, o, p)
			}
			if w, dup := seen[o]; dup {
				t.Fatalf("trial %d: chunk %d is in %s and %s: %v", trial, o, w, where, p)
			}
			seen[o] = where
		}
		for _, a := range p.Parents {
			id := a.Named.Info.ID
			if avoided(id) {
				t.Fatalf("trial %d: avoided parent %s asked: %v", trial, id, p)
			}
			for _, b := range a.Batches {
				var bytes int64
				for _, c := range b {
					once(c.Ordinal, string(id))
					if !namedBy[id][c.Ordinal] {
						t.Fatalf("trial %d: %s asked for chunk %d the Route did not name it for: %v", trial, id, c.Ordinal, p)
					}
					bytes += int64(max(c.CompressedSize, c.Size))
				}
				if len(b) > in.Limits.MaxChunks || (len(b) > 1 && bytes > in.Limits.MaxBytes) {
					t.Fatalf("trial %d: request of %d chunks, %d bytes over the limits %+v", trial, len(b), bytes, in.Limits)
				}
			}
		}
		for _, o := range p.Fallback.Chunks {
			once(o, "fallback")
		}
		for _, a := range p.Fallback.Parents {
			if avoided(a.ID) {
				t.Fatalf("trial %d: avoided parent %s in the fallback: %v", trial, a.ID, p)
			}
		}
		for _, c := range p.Origin {
			once(c.Ordinal, "origin")
			if !granted[c.Ordinal] {
				t.Fatalf("trial %d: origin chunk %d was not granted: %v", trial, c.Ordinal, p)
			}
		}
		for _, o := range p.Wait {
			once(o, "wait")
		}
		if !slices.IsSorted(p.Wait) || !slices.IsSorted(p.Fallback.Chunks) {
			t.Fatalf("trial %d: lists not ascending: %v", trial, p)
		}
		if in.Hedge {
			continue
		}
		for _, c := range pending {
			if _, ok := seen[c.Ordinal]; !ok && (in.Route == nil || inRoute[c.Ordinal]) {
				t.Fatalf("trial %d: pending chunk %d the Route named is planned nowhere: %v", trial, c.Ordinal, p)
			}
		}
	}
}
