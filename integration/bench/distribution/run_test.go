package main

import (
	"context"
	"io"
	"testing"
	"time"
)

// TestTinyRun runs the whole harness on 2 nodes and a 4 MiB image with
// unshaped links, with and without P2P, so that CI exercises it.
func TestTinyRun(t *testing.T) {
	out := t.TempDir()
	for _, p2p := range []bool{true, false} {
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		cfg := Default()
		cfg.Nodes, cfg.ImageMiB, cfg.NodeMbit, cfg.Runs, cfg.RTT = 2, 4, 0, 1, 0
		cfg.P2P, cfg.Out, cfg.Work, cfg.RunTimeout = p2p, out, t.TempDir(), 30*time.Second
		cfg.Spread = p2p // exercises the rotated reading order too
		s, err := run(ctx, cfg, io.Discard)
		cancel()
		if err != nil {
			t.Fatalf("p2p=%t: %v", p2p, err)
		}
		if s.Spread != p2p || s.P2P != p2p {
			t.Errorf("scenario records p2p=%t spread=%t, want %t and %t", s.P2P, s.Spread, p2p, p2p)
		}
		if len(s.Runs) != 1 || len(s.Runs[0].Nodes) != 2 {
			t.Fatalf("p2p=%t: got %d runs, want 1 of 2 nodes", p2p, len(s.Runs))
		}
		var peer int64
		for _, n := range s.Runs[0].Nodes {
			if n.Bytes != s.ImageBytes || n.PeerBytes+n.OriginBytes != s.ImageBytes {
				t.Errorf("p2p=%t: %s got %d bytes (%d from peers, %d from origin), want %d", p2p, n.Name, n.Bytes, n.PeerBytes, n.OriginBytes, s.ImageBytes)
			}
			peer += n.PeerBytes
		}
		// The origin's link carries each chunk at least once; without P2P
		// once per node.
		if min := float64(map[bool]int{true: 1, false: 2}[p2p]); s.OriginRatio < min {
			t.Errorf("p2p=%t: origin sent %.2fx the image, want at least %.0fx", p2p, s.OriginRatio, min)
		}
		if !p2p && peer != 0 {
			t.Errorf("without P2P the nodes got %d bytes from peers, want 0", peer)
		}
	}
	rep, err := loadReport(out)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Scenarios) != 2 {
		t.Errorf("report holds %d scenarios, want 2", len(rep.Scenarios))
	}
}
