package backend

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"damselfly/rafs"
)

// readRemote is a registry-type read: one range, retried by retry.
func (b *Backend) readRemote(ctx context.Context, blob rafs.Blob, off int64, p []byte) (Source, error) {
	return b.retry(ctx,
		func(ctx context.Context, src Source, again bool) error {
			return b.attempt(ctx, src, blob, off, p, again)
		},
		func(src Source, attempts int, elapsed time.Duration, err error) error {
			return b.readError(blob, off, p, src, attempts, elapsed, err)
		})
}

// retry is the retry loop of registry-type reads. try makes one attempt
// on src (again: it follows another attempt of the same read); a read
// that can make progress (a run of chunks) keeps it between attempts.
// fail describes the read's failure. Each attempt goes to the source
// choose picks; after a failure:
//
//   - permanent (404, 416, 400, another unexpected status): the read
//     fails, unless it came from the proxy and Fallback is on, in which
//     case this read asks the registry, the authority, instead;
//   - 401/403 from the registry: the next attempt starts from a fresh
//     handshake at once; a second in a row fails the read. From the
//     proxy it counts as permanent;
//   - transient: the proxy is marked unhealthy at once if it could not be
//     reached or answered 5xx, or after RetryLimit transient failures in a
//     row; after RetryLimit in a row from the registry the next attempt
//     tries the proxy even if it is marked unhealthy. The read sleeps
//     (exponential backoff with jitter) before every retry except a
//     fallback from the proxy to the registry, which is immediate.
//
// Config.Deadline bounds the whole read, attempts included: each attempt
// gets the ctx try is called with, which ends when the deadline passes
// (or Config.Timeout after the attempt began, whichever comes first), so
// an attempt in flight at the deadline is cut off there, and the read
// fails with ErrDeadline naming the last failure. A read that is still
// failing transiently when the deadline has passed fails the same way;
// one whose backoff ends at the deadline fails without another attempt.
// A *deliverError from try ends the read at once and is returned as it
// is.
func (b *Backend) retry(ctx context.Context, try func(ctx context.Context, src Source, again bool) error,
	fail func(src Source, attempts int, elapsed time.Duration, err error) error) (Source, error) {
	start := b.clock.Now()
	deadline := start.Add(b.cfg.Deadline)
	var (
		src, prev   Source
		attempts    int
		failures    int  // transient failures, for the backoff
		streak      int  // attempts in a row on src
		bypassProxy bool // the proxy cannot serve this blob: use the registry
		tryProxy    bool // the registry failed RetryLimit times: try the proxy once
		reauthed    bool // the last failure was a 401 already retried
		lastErr     error
	)
	giveUp := func(err error) (Source, error) {
		return src, fail(src, attempts, b.clock.Now().Sub(start), err)
	}
	for {
		left := deadline.Sub(b.clock.Now())
		if left <= 0 && attempts > 0 {
			return giveUp(fmt.Errorf("%w (%s): last failure: %w", ErrDeadline, b.cfg.Deadline, lastErr))
		}
		src = b.choose(bypassProxy, tryProxy)
		tryProxy = false
		if src == prev {
			streak++
		} else {
			streak = 1
		}
		prev = src
		// The clock says how much time is left; a real timer holds the
		// attempt's I/O to it.
		actx, stop := context.WithTimeoutCause(ctx, left, errReadDeadline)
		err := try(actx, src, attempts > 0)
		cut := context.Cause(actx) == errReadDeadline
		stop()
		attempts++
		if err == nil {
			return src, nil
		}
		var de *deliverError
		if errors.As(err, &de) {
			return src, de
		}
		if ctx.Err() != nil {
			return giveUp(fmt.Errorf("%w (last failure: %v)", ctx.Err(), err))
		}
		if cut {
			// The deadline stopped this attempt: no verdict on the
			// source. The failure before it, if any, says why the read
			// failed.
			why := fmt.Sprintf("the %s attempt in flight was stopped", src)
			if lastErr == nil {
				return giveUp(fmt.Errorf("%w (%s): %s", ErrDeadline, b.cfg.Deadline, why))
			}
			return giveUp(fmt.Errorf("%w (%s): %s; last failure: %w", ErrDeadline, b.cfg.Deadline, why, lastErr))
		}
		lastErr = err

		sleep := true
		switch classify(err) {
		case permanent:
			if src != SourceProxy || !b.cfg.Proxy.Fallback {
				return giveUp(err)
			}
			bypassProxy, sleep = true, false
		case reauth:
			switch {
			case src == SourceProxy && b.cfg.Proxy.Fallback:
				bypassProxy, sleep = true, false
			case src == SourceProxy || reauthed:
				return giveUp(err)
			default:
				reauthed, sleep = true, false
			}
		case transient:
			reauthed = false
			failures++
			if src == SourceProxy {
				if proxyDown(err) || streak >= b.cfg.RetryLimit {
					b.proxy.setHealthy(false, err)
				}
				// Falling back to the registry is immediate.
				sleep = b.choose(bypassProxy, false) == SourceProxy
			} else if b.proxy != nil && !bypassProxy && streak >= b.cfg.RetryLimit {
				tryProxy = true
			}
		}

		now := b.clock.Now()
		if !now.Before(deadline) {
			return giveUp(fmt.Errorf("%w (%s): last failure: %w", ErrDeadline, b.cfg.Deadline, lastErr))
		}
		if !sleep {
			continue
		}
		select {
		case <-ctx.Done():
			return giveUp(fmt.Errorf("%w (last failure: %v)", ctx.Err(), lastErr))
		case <-b.clock.After(wait(failures, rand.Float64(), retryAfter(err), deadline.Sub(now))):
		}
	}
}

// choose picks the source of the next attempt: the proxy while it is
// healthy (or always, without Fallback), else the registry. bypassProxy
// and tryProxy are the read's own verdicts that override the health state.
func (b *Backend) choose(bypassProxy, tryProxy bool) Source {
	switch {
	case b.proxy == nil:
		return SourceRegistry
	case tryProxy || !b.cfg.Proxy.Fallback:
		return SourceProxy
	case bypassProxy || !b.proxy.healthy.Load():
		return SourceRegistry
	default:
		return SourceProxy
	}
}

// attempt sends one request to src, bounded by Config.Timeout, and counts
// it.
func (b *Backend) attempt(ctx context.Context, src Source, blob rafs.Blob, off int64, p []byte, retry bool) error {
	st := b.stats.of(src)
	st.requests.Add(1)
	if retry {
		st.retries.Add(1)
	}
	if src == SourceRegistry && b.proxy != nil {
		b.stats.fallbacks.Add(1)
	}
	actx, cancel := context.WithTimeout(ctx, b.cfg.Timeout)
	defer cancel()
	var err error
	if src == SourceProxy {
		err = b.proxy.read(actx, b.reg, blob.Digest, off, p)
	} else {
		err = b.reg.read(actx, blob.Digest, off, p)
	}
	if err != nil {
		st.errors.Add(1)
		if ctx.Err() == nil && actx.Err() != nil {
			// Our own timeout: say so without wrapping context errors,
			// which callers read as "the caller gave up".
			err = fmt.Errorf("%w after %s: %v", errTimeout, b.cfg.Timeout, err)
		}
		return err
	}
	st.bytes.Add(uint64(len(p)))
	return nil
}
