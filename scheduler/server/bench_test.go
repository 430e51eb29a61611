package server

import (
	"context"
	"syscall"
	"testing"
	"time"

	"damselfly/scheduler/wire"
)

// processCPU is this process's user and system CPU time so far.
func processCPU() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkRequest measures one Announce from a peer to the scheduler
// over loopback libp2p, on a stream of its own (the 1.0.0 protocol) and
// on a session; cpu-ns/op is the CPU of both ends (one process).
func BenchmarkRequest(b *testing.B) {
	s := startServer(b, testConfig(b))
	p := newPeer(b)
	ctx := context.Background()
	if _, err := tryRequest(ctx, p, s.AddrInfo(), &wire.Register{}); err != nil {
		b.Fatal(err)
	}
	req := &wire.Announce{Blob: blobA, Chunks: []uint32{1}}
	check := func(b *testing.B, resp wire.Message, err error) {
		if err != nil {
			b.Fatal(err)
		}
		if _, ok := resp.(*wire.OK); !ok {
			b.Fatalf("got %#v, want OK", resp)
		}
	}
	b.Run("stream", func(b *testing.B) {
		cpu := processCPU()
		for b.Loop() {
			resp, err := tryRequest(ctx, p, s.AddrInfo(), req)
			check(b, resp, err)
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
	b.Run("session", func(b *testing.B) {
		st, err := p.NewStream(ctx, s.AddrInfo().ID, wire.SessionProtocolID)
		if err != nil {
			b.Fatal(err)
		}
		defer st.Close()
		cpu := processCPU()
		for b.Loop() {
			if err := wire.WriteFrame(st, req); err != nil {
				b.Fatal(err)
			}
			resp, err := wire.ReadFrame(st)
			check(b, resp, err)
		}
		b.ReportMetric(float64(processCPU()-cpu)/float64(b.N), "cpu-ns/op")
	})
}
