package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"

	"damselfly/rafs/backoff"
	"damselfly/scheduler/wire"
)

// rateLimited is the backoff between the attempts of a request the
// scheduler answered "rate limited": 20 ms doubling to 500 ms, each
// jittered into [d/2, d).
var rateLimited = backoff.Schedule{First: 20 * time.Millisecond, Max: 500 * time.Millisecond}

// call sends req to r on a new stream and returns the response. An error
// response is returned as a *wire.Error. The stream never outlives ctx.
// A "rate limited" answer to a request the scheduler did not act on (too
// many streams or requests) is waited out: the request is sent again
// after a pause until ctx ends, rather than reported as a failure that
// would have the caller ask another scheduler (which does not own the
// blob) or the origin. A report is not sent again: its "rate limited"
// may refuse an accusation after the rest of the report was taken.
func (c *Client) call(ctx context.Context, r *remote, req wire.Message) (wire.Message, error) {
	_, report := req.(*wire.Report)
	for attempt := 1; ; attempt++ {
		resp, err := c.callOnce(ctx, r, req)
		if report || codeOf(err) != wire.CodeRateLimited {
			return resp, err
		}
		d := rateLimited.Delay(attempt, rand.Float64())
		if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
			return nil, err
		}
		t := time.NewTimer(d)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, err
		case <-t.C:
		}
	}
}

// callOnce is one attempt of call: on a session stream kept from an
// earlier request (see sessions), or on a new stream, a session if the
// scheduler speaks it. A kept session that fails before any answer (the
// scheduler closed it while idle, or answered on it once only) is
// dropped and the request sent again on a new stream: the scheduler did
// not act on it.
func (c *Client) callOnce(ctx context.Context, r *remote, req wire.Message) (wire.Message, error) {
	resp, retry, err := c.exchange(ctx, r, req, r.sessions.take())
	if retry {
		r.sessions.lost()
		resp, _, err = c.exchange(ctx, r, req, nil)
	}
	return resp, err
}

// exchange sends req on st, or on a new stream when st is nil, and reads
// the answer. retry reports that st, a kept session, failed before the
// scheduler could have acted on req.
func (c *Client) exchange(ctx context.Context, r *remote, req wire.Message, st network.Stream) (_ wire.Message, retry bool, _ error) {
	kept := st != nil
	if !kept {
		// Force a dial past libp2p's dial backoff: a scheduler that was
		// down is retried at the heartbeat rate, not the backoff's minutes.
		var err error
		st, err = c.h.NewStream(network.WithForceDirectDial(ctx, "scheduler"), r.info.ID, wire.SessionProtocolID, wire.ProtocolID)
		if err != nil {
			return nil, false, fmt.Errorf("%s to scheduler %s: open stream: %w", req.Type(), r.name, err)
		}
	}
	session := st.Protocol() == wire.SessionProtocolID
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.cfg.RequestTimeout)
	}
	_ = st.SetDeadline(deadline)
	// Reset the stream when ctx ends first, so a silent scheduler cannot
	// hold the caller past its context.
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })

	if err := wire.WriteFrame(st, req); err != nil {
		stop()
		_ = st.Reset()
		return nil, kept && ctx.Err() == nil, fmt.Errorf("%s to scheduler %s: %w", req.Type(), r.name, err)
	}
	if !session {
		_ = st.CloseWrite()
	}
	resp, err := wire.ReadFrame(st)
	if !stop() {
		// ctx ended and reset the stream, whatever was read.
		_ = st.Reset()
		if err == nil {
			err = ctx.Err()
		}
		return nil, false, fmt.Errorf("%s to scheduler %s: read response: %w", req.Type(), r.name, err)
	}
	if err != nil {
		_ = st.Reset()
		closedIdle := errors.Is(err, io.EOF) || errors.Is(err, network.ErrReset)
		return nil, kept && closedIdle && ctx.Err() == nil, fmt.Errorf("%s to scheduler %s: read response: %w", req.Type(), r.name, err)
	}
	if session {
		_ = st.SetDeadline(time.Time{})
		r.sessions.keep(st)
	} else {
		_ = st.Close()
	}
	if e, ok := resp.(*wire.Error); ok {
		return nil, false, fmt.Errorf("%s to scheduler %s: %w", req.Type(), r.name, e)
	}
	return resp, false, nil
}

// codeOf returns the code of a scheduler's error response in err, or 0.
func codeOf(err error) wire.Code {
	var e *wire.Error
	if errors.As(err, &e) {
		return e.Code
	}
	return 0
}

// callOK is call for requests answered by OK.
func (c *Client) callOK(ctx context.Context, r *remote, req wire.Message) (*wire.OK, error) {
	resp, err := c.call(ctx, r, req)
	if err != nil {
		return nil, err
	}
	ok, isOK := resp.(*wire.OK)
	if !isOK {
		return nil, fmt.Errorf("%s to scheduler %s: got a %s response, want ok", req.Type(), r.name, resp.Type())
	}
	return ok, nil
}

// callTimeout is callOK bounded by RequestTimeout.
func (c *Client) callTimeout(ctx context.Context, r *remote, req wire.Message) (*wire.OK, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.RequestTimeout)
	defer cancel()
	return c.callOK(ctx, r, req)
}

// Sessions kept per scheduler. A peer's requests to one scheduler come a
// few at a time (heartbeats, flushes, the routes of the reads in
// progress); a request that finds no kept session opens a new one, and
// what is kept beyond maxKept is closed.
const (
	maxKept = 2
	// sessionIdle is how long a kept session may wait for its next
	// request; the scheduler closes sessions idle for 30 s.
	sessionIdle = 5 * time.Second
	// keepPause is how long no session is kept after a kept one was
	// found closed: a scheduler short of sessions answers each once,
	// and keeping them would cost every request a second try.
	keepPause = 30 * time.Second
)

// sessions are the idle session streams kept for one scheduler, the
// most recently used last.
type sessions struct {
	mu     sync.Mutex
	idle   []keptStream
	closed bool
	lostAt time.Time // a kept session was last found closed
}

type keptStream struct {
	st   network.Stream
	used time.Time
}

// take returns the most recently used idle session, or nil. Sessions
// idle for sessionIdle are closed.
func (s *sessions) take() network.Stream {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := time.Now()
	for len(s.idle) > 0 {
		k := s.idle[len(s.idle)-1]
		s.idle = s.idle[:len(s.idle)-1]
		if now.Sub(k.used) < sessionIdle {
			return k.st
		}
		_ = k.st.Close()
	}
	return nil
}

// keep puts st, idle now, back for the next request, or closes it.
func (s *sessions) keep(st network.Stream) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || len(s.idle) >= maxKept || time.Since(s.lostAt) < keepPause {
		_ = st.Close()
		return
	}
	s.idle = append(s.idle, keptStream{st: st, used: time.Now()})
}

// lost notes that a kept session was found closed: for keepPause none is
// kept, and those idle are closed.
func (s *sessions) lost() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.lostAt = time.Now()
	s.dropIdleLocked()
}

// close closes every idle session and keeps none from now on.
func (s *sessions) close() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.closed = true
	s.dropIdleLocked()
}

// dropIdleLocked closes every idle session. The caller holds mu.
func (s *sessions) dropIdleLocked() {
	for _, k := range s.idle {
		_ = k.st.Close()
	}
	s.idle = nil
}
