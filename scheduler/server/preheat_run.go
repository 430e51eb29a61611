package server

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"
	ma "github.com/multiformats/go-multiaddr"

	"damselfly/scheduler/preheatwire"
)

// runTarget asks one peer to preheat and follows its progress until its
// result, its failure, or ctx ends (the job cancelled or timed out), which
// resets the stream so that the peer stops at once.
func (m *preheats) runTarget(ctx context.Context, job *preheatJob, t *preheatTarget) {
	t.set(func(t *preheatTarget) { t.state, t.started = preheatRunning, time.Now() })
	state, msg := m.followTarget(ctx, job, t)
	if ctx.Err() != nil && state != preheatDone {
		job.mu.Lock()
		cancelled := job.cancelled
		job.mu.Unlock()
		if cancelled {
			state, msg = preheatCancelled, ""
		} else {
			state, msg = preheatFailed, "timed out: "+msg
		}
	}
	t.end(state, msg)
	if state == preheatFailed {
		m.s.log.Warn("preheat failed on a peer", "job", job.id, "peer", t.peer, "err", msg)
	}
}

// followTarget runs the stream with one peer and returns the target's
// final state and message.
func (m *preheats) followTarget(ctx context.Context, job *preheatJob, t *preheatTarget) (string, string) {
	id, err := peer.Decode(t.peer)
	if err != nil {
		return preheatFailed, fmt.Sprintf("peer ID: %v", err)
	}
	h := m.s.host
	var addrs []ma.Multiaddr
	for _, a := range t.addrs {
		if maddr, err := ma.NewMultiaddr(a); err == nil {
			addrs = append(addrs, maddr)
		}
	}
	h.Peerstore().AddAddrs(id, addrs, peerstore.TempAddrTTL)
	dctx, dcancel := context.WithTimeout(ctx, preheatDialTimeout)
	st, err := h.NewStream(dctx, id, preheatwire.ProtocolID)
	dcancel()
	if err != nil {
		return preheatFailed, fmt.Sprintf("open stream: %v", err)
	}
	// Cancelling the job resets the stream: the peer's watcher sees it
	// and cancels its fetches, and the read below returns.
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer stop()

	_ = st.SetWriteDeadline(time.Now().Add(preheatWriteTimeout))
	if err := preheatwire.WriteFrame(st, &preheatwire.Request{Image: job.req.Image, PrefetchOnly: job.req.PrefetchOnly}); err != nil {
		_ = st.Reset()
		return preheatFailed, fmt.Sprintf("send request: %v", err)
	}
	for {
		_ = st.SetReadDeadline(time.Now().Add(preheatStall))
		msg, err := preheatwire.ReadFrame(st)
		if err != nil {
			_ = st.Reset()
			if errors.Is(err, preheatwire.ErrMalformed) {
				return preheatFailed, fmt.Sprintf("peer broke the protocol: %v", err)
			}
			return preheatFailed, fmt.Sprintf("peer stream: %v", err)
		}
		switch msg := msg.(type) {
		case *preheatwire.Progress:
			t.set(func(t *preheatTarget) { t.counts = msg.Counts })
		case *preheatwire.Result:
			t.set(func(t *preheatTarget) { t.counts = msg.Counts })
			_ = st.Close()
			if !msg.OK {
				return preheatFailed, msg.Message
			}
			return preheatDone, ""
		default:
			_ = st.Reset()
			return preheatFailed, fmt.Sprintf("peer sent a %s frame", msg.Type())
		}
	}
}
