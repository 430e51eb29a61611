package client

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
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

// callOnce is one attempt of call.
func (c *Client) callOnce(ctx context.Context, r *remote, req wire.Message) (wire.Message, error) {
	// Force a dial past libp2p's dial backoff: a scheduler that was down
	// is retried at the heartbeat rate, not the backoff's minutes.
	ctx = network.WithForceDirectDial(ctx, "scheduler")
	st, err := c.h.NewStream(ctx, r.info.ID, wire.ProtocolID)
	if err != nil {
		return nil, fmt.Errorf("%s to scheduler %s: open stream: %w", req.Type(), r.name, err)
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(c.cfg.RequestTimeout)
	}
	_ = st.SetDeadline(deadline)
	// Reset the stream when ctx ends first, so a silent scheduler cannot
	// hold the caller past its context.
	stop := context.AfterFunc(ctx, func() { _ = st.Reset() })
	defer stop()

	if err := wire.WriteFrame(st, req); err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("%s to scheduler %s: %w", req.Type(), r.name, err)
	}
	_ = st.CloseWrite()
	resp, err := wire.ReadFrame(st)
	if err != nil {
		_ = st.Reset()
		return nil, fmt.Errorf("%s to scheduler %s: read response: %w", req.Type(), r.name, err)
	}
	_ = st.Close()
	if e, ok := resp.(*wire.Error); ok {
		return nil, fmt.Errorf("%s to scheduler %s: %w", req.Type(), r.name, e)
	}
	return resp, nil
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
