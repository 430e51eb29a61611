package peer

import (
	"net/http"
	"testing"

	"damselfly/rafs/piece"
)

// BenchmarkPlainBlob measures a whole-blob GET of a 64 MiB plain layer
// through a node's mirror, in pieces of the default size: from the
// registry (nobody holds it: pass-through while recording the pieces),
// from the node's own pieces (a second pull), and from another node's
// pieces over libp2p (PSK + Noise). Each origin and peers iteration
// starts with the reading node holding nothing of the blob.
func BenchmarkPlainBlob(b *testing.B) {
	key, reg := clusterKey(b), newPlainRegistry(b)
	data := randBytes(60, 64<<20)
	blob := reg.push(b, "bench/plain", data)
	def := func(c *NodeConfig) { c.PieceSize = piece.DefaultSize }
	get := func(b *testing.B, m *mirrorNode) {
		code, body, err := m.get(b, "bench/plain", blob, "")
		if err != nil || code != http.StatusOK || len(body) != len(data) {
			b.Fatalf("GET: %d, %d bytes, %v", code, len(body), err)
		}
	}
	reset := func(m *mirrorNode) {
		m.Plain().Forget(blob)
	}
	b.Run("origin", func(b *testing.B) {
		m := newMirrorNode(b, key, newScheduler(b), reg, nil, def)
		b.SetBytes(int64(len(data)))
		for b.Loop() {
			b.StopTimer()
			reset(m)
			b.StartTimer()
			get(b, m)
		}
	})
	// A node pulling again a blob it holds and has checked (its own
	// table): every piece from its cache.
	b.Run("node", func(b *testing.B) {
		m := newMirrorNode(b, key, newScheduler(b), reg, nil, def)
		get(b, m)
		b.SetBytes(int64(len(data)))
		before := reg.blobBytes.Load()
		for b.Loop() {
			get(b, m)
		}
		if n := reg.blobBytes.Load() - before; n != 0 {
			b.Fatalf("registry sent %d blob bytes for a blob the node holds", n)
		}
	})
	b.Run("peers", func(b *testing.B) {
		st := newScheduler(b)
		src := newMirrorNode(b, key, st, reg, nil, def)
		get(b, src)
		m := newMirrorNode(b, key, st, reg, nil, def)
		b.SetBytes(int64(len(data)))
		before := reg.blobBytes.Load()
		for b.Loop() {
			b.StopTimer()
			reset(m)
			b.StartTimer()
			get(b, m)
		}
		if n := reg.blobBytes.Load() - before; n != 0 {
			b.Fatalf("registry sent %d blob bytes while reading from peers", n)
		}
	})
}
