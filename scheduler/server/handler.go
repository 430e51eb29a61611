package server

import (
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"golang.org/x/time/rate"

	"damselfly/rafs"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// handle serves one stream: one request frame in, one response frame out.
func (s *Server) handle(st network.Stream) {
	from := st.Conn().RemotePeer()
	_ = st.SetDeadline(time.Now().Add(s.cfg.StreamTimeout))
	admitted, closed := s.acquire(from)
	if closed {
		_ = st.Reset()
		return
	}
	defer s.streams.Done()
	if !admitted {
		s.metrics.requests.WithLabelValues("any", wire.CodeRateLimited.String()).Inc()
		s.reply(st, &wire.Error{Code: wire.CodeRateLimited, Message: "too many streams"})
		return
	}
	defer s.release(from)

	req, err := wire.ReadFrame(st)
	if err != nil {
		if errors.Is(err, wire.ErrMalformed) {
			s.reply(st, s.malformed(from, err))
			return
		}
		_ = st.Reset()
		return
	}
	resp := s.answer(st, from, req)
	if !s.reply(st, resp) {
		s.undeliverable(from, req, resp)
	}
}

// sessionIdle is how long a session stream may wait for its next
// request before the server closes it. Clients keep idle sessions for
// much less (client.sessionIdle), so the server rarely closes one a
// request is on its way to.
const sessionIdle = 30 * time.Second

// handleSession serves a session stream (wire.SessionProtocolID): one
// request frame after another, each answered in turn, until the peer
// closes it, it stays idle sessionIdle, or a frame is malformed. Each
// request is admitted as a stream of its own is (acquire), so that idle
// sessions hold no stream slot; the sessions a peer may hold at once are
// bounded by MaxStreamsPerPeer, and past that (or past two sessions for
// each of MaxPeers peers) a session is answered once and closed, like a
// stream of the one-request protocol; the client, finding a kept session
// closed, keeps none for a while.
func (s *Server) handleSession(st network.Stream) {
	from := st.Conn().RemotePeer()
	reuse := s.openSession(from)
	if reuse {
		defer s.closeSession(from)
	}
	for {
		_ = st.SetDeadline(time.Now().Add(sessionIdle))
		req, err := wire.ReadFrame(st)
		if err != nil {
			if errors.Is(err, wire.ErrMalformed) {
				// The frame's end is unknown: answer and end the session.
				s.reply(st, s.malformed(from, err))
				return
			}
			if errors.Is(err, io.EOF) {
				_ = st.Close() // the peer ended the session
			} else {
				_ = st.Reset()
			}
			return
		}
		_ = st.SetDeadline(time.Now().Add(s.cfg.StreamTimeout))
		admitted, closed := s.acquire(from)
		if closed {
			_ = st.Reset()
			return
		}
		var resp wire.Message
		if admitted {
			resp = s.answer(st, from, req)
		} else {
			s.metrics.requests.WithLabelValues(req.Type().String(), wire.CodeRateLimited.String()).Inc()
			resp = &wire.Error{Code: wire.CodeRateLimited, Message: "too many streams"}
		}
		err = wire.WriteFrame(st, resp)
		if admitted {
			s.release(from)
		}
		s.streams.Done()
		if err != nil {
			_ = st.Reset()
			s.undeliverable(from, req, resp)
			return
		}
		if !reuse {
			_ = st.Close()
			return
		}
	}
}

// openSession counts a session of p and reports whether it may carry
// more than one request (see handleSession).
func (s *Server) openSession(p peer.ID) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[p] >= s.cfg.MaxStreamsPerPeer || s.nsessions >= 2*s.cfg.State.MaxPeers {
		return false
	}
	s.sessions[p]++
	s.nsessions++
	return true
}

func (s *Server) closeSession(p peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nsessions--
	decrement(s.sessions, p)
}

// decrement takes one from p's count in m, forgetting p at zero.
func decrement(m map[peer.ID]int, p peer.ID) {
	if m[p] <= 1 {
		delete(m, p)
	} else {
		m[p]--
	}
}

// malformed counts and logs a malformed request from p and returns the
// error to answer it with.
func (s *Server) malformed(p peer.ID, err error) wire.Message {
	s.metrics.requests.WithLabelValues("malformed", wire.CodeBadRequest.String()).Inc()
	s.log.Debug("malformed request", "peer", p, "err", err)
	return &wire.Error{Code: wire.CodeBadRequest, Message: err.Error()}
}

// answer applies req, admitted as a stream, from p (over st) and returns
// the response: "rate limited" past the peer's request budget, a held
// route for a RouteWait, otherwise what serve says.
func (s *Server) answer(st network.Stream, from peer.ID, req wire.Message) wire.Message {
	if _, beat := req.(*wire.Heartbeat); !beat && !s.allow(from, time.Now()) {
		// Heartbeats pass: a peer slowed down here must not also be
		// dropped, with its holdings, for missing them.
		s.metrics.requests.WithLabelValues(req.Type().String(), wire.CodeRateLimited.String()).Inc()
		return &wire.Error{Code: wire.CodeRateLimited, Message: "too many requests"}
	}
	var resp wire.Message
	if m, ok := req.(*wire.RouteWait); ok {
		resp = s.routeWait(from, m)
	} else {
		resp = s.serve(from.String(), sourceOf(st.Conn().RemoteMultiaddr()), req, time.Now())
	}
	result := "ok"
	if e, ok := resp.(*wire.Error); ok {
		result = e.Code.String()
		s.log.Debug("request refused", "peer", from, "type", req.Type(), "err", e)
	}
	s.metrics.requests.WithLabelValues(req.Type().String(), result).Inc()
	return resp
}

// reply sends m and reports whether it went out.
func (s *Server) reply(st network.Stream, m wire.Message) bool {
	if err := wire.WriteFrame(st, m); err != nil {
		_ = st.Reset()
		return false
	}
	_ = st.Close()
	return true
}

// undeliverable gives back the origin turns a route answer that could not
// be sent granted: the peer went away (its read was given up while the
// route was held, say) and will not fetch them, and until origin_timeout
// every other peer asking for those chunks would be told to wait for it.
func (s *Server) undeliverable(from peer.ID, req, resp wire.Message) {
	a, ok := resp.(*wire.Answer)
	if !ok || len(a.Answer.Origin) == 0 {
		return
	}
	var blob rafs.Digest
	switch m := req.(type) {
	case *wire.Route:
		blob = m.Blob
	case *wire.RouteWait:
		blob = m.Blob
	default:
		return
	}
	if _, err := s.state.AbandonOrigin(from.String(), blob, a.Answer.Origin, time.Now()); err == nil {
		s.metrics.undelivered.Add(float64(len(a.Answer.Origin)))
		s.watches.fire(blob, a.Answer.Origin, nil)
	}
}

// acquire admits a stream from p unless p has MaxStreamsPerPeer open or
// the server has MaxStreams. A stream that gets past the closed check is
// counted in s.streams, which the caller releases with Done.
func (s *Server) acquire(p peer.ID) (admitted, closed bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false, true
	}
	s.streams.Add(1)
	if s.perPeer[p] >= s.cfg.MaxStreamsPerPeer || s.active >= s.cfg.MaxStreams {
		return false, false
	}
	s.perPeer[p]++
	s.active++
	return true, false
}

// allow takes a token from p's bucket (RequestsPerPeer), and reports
// whether there was one.
func (s *Server) allow(p peer.ID, now time.Time) bool {
	if s.cfg.RequestsPerPeer <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	lim := s.limiters[p]
	if lim == nil {
		lim = rate.NewLimiter(rate.Limit(s.cfg.RequestsPerPeer), s.cfg.RequestBurstPerPeer)
		s.limiters[p] = lim
	}
	return lim.AllowN(now, 1)
}

// sweepLimiters forgets the token buckets that have refilled: a new one
// is the same, so the map holds only peers that were busy lately.
func (s *Server) sweepLimiters(now time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	burst := float64(s.cfg.RequestBurstPerPeer)
	for p, lim := range s.limiters {
		if lim.TokensAt(now) >= burst {
			delete(s.limiters, p)
		}
	}
}

// reacquire takes back the slot a held route gave up, over the bounds:
// the stream was admitted once already.
func (s *Server) reacquire(p peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.perPeer[p]++
	s.active++
}

func (s *Server) release(p peer.ID) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.active--
	decrement(s.perPeer, p)
}

// serve applies req for the peer from, connected from the machine src
// (sourceOf), and returns the response.
func (s *Server) serve(from, src string, req wire.Message, now time.Time) wire.Message {
	var err error
	switch m := req.(type) {
	case *wire.Register:
		for _, a := range m.Addrs {
			if _, perr := ma.NewMultiaddr(a); perr != nil {
				return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("address %q: %v", a, perr)}
			}
		}
		err = s.state.Register(from, scheduler.PeerInfo{Addrs: m.Addrs, Labels: m.Labels, UploadCapacity: m.UploadCapacity, Source: src}, now)
	case *wire.Heartbeat:
		err = s.state.Heartbeat(from, m.Load, now)
	case *wire.Announce:
		if _, err = s.state.Announce(from, m.Blob, m.Chunks, now); err == nil {
			s.watches.fire(m.Blob, m.Chunks, nil)
		}
	case *wire.AnnounceFull:
		if _, err = s.state.AnnounceFull(from, m.Blob, m.Held, now); err == nil {
			s.watches.fire(m.Blob, nil, m.Held)
		}
	case *wire.Drop:
		var woken []string
		if woken, err = s.state.Drop(from, m.Blob, m.Chunks, now); err == nil && len(woken) > 0 {
			s.watches.fire(m.Blob, m.Chunks, nil)
		}
	case *wire.Abandon:
		if _, err = s.state.AbandonOrigin(from, m.Blob, m.Chunks, now); err == nil {
			s.watches.fire(m.Blob, m.Chunks, nil)
		}
	case *wire.Route:
		return s.route(from, m, now)
	case *wire.Report:
		var banned bool
		banned, err = s.state.Report(from, m.About, m.Outcome, now)
		if err == nil {
			if banned {
				s.log.Warn("peer banned by quorum", "peer", m.About, "last_accuser", from)
			}
			return &wire.OK{Banned: banned}
		}
	case *wire.Unregister:
		s.state.Unregister(from)
	default:
		return &wire.Error{Code: wire.CodeBadRequest, Message: fmt.Sprintf("%s is not a request", req.Type())}
	}
	if err != nil {
		return errorResponse(err)
	}
	return &wire.OK{}
}

func (s *Server) route(from string, m *wire.Route, now time.Time) wire.Message {
	start := time.Now()
	a, err := s.state.ParentsSized(from, m.Blob, m.Chunks, m.Bytes, now)
	s.metrics.routeSeconds.Observe(time.Since(start).Seconds())
	if err != nil {
		return errorResponse(err)
	}
	var parents, waits int
	for _, p := range a.Parents {
		parents += len(p.Chunks)
	}
	for _, w := range a.Wait {
		waits += len(w.Chunks)
	}
	s.metrics.routeChunks.WithLabelValues("parent").Add(float64(parents))
	s.metrics.routeChunks.WithLabelValues("origin").Add(float64(len(a.Origin)))
	s.metrics.routeChunks.WithLabelValues("wait").Add(float64(waits))
	return &wire.Answer{Answer: a}
}

// routeWait answers a RouteWait: as a Route, except that an answer that
// is all waits is held (watch.go) until one of the chunks is announced
// or given up, the shortest wait's RetryAfter or the request's MaxWait
// passes, or the server stops; then the route is answered afresh. The
// watch starts before the first answer, so an announcement in between
// is not missed. A held route gives back the peer's stream slot (it has
// one of maxHeldPerPeer instead), so a peer's waits never crowd out its
// other requests.
func (s *Server) routeWait(from peer.ID, m *wire.RouteWait) wire.Message {
	w := s.watches.add(from, m.Blob, m.Chunks)
	r := &wire.Route{Blob: m.Blob, Chunks: m.Chunks, Bytes: m.Bytes}
	resp := s.route(from.String(), r, time.Now())
	if w == nil {
		return resp
	}
	hold := holdFor(resp, min(m.MaxWait, s.cfg.StreamTimeout/2))
	if hold <= 0 {
		s.watches.remove(from, m.Blob, w)
		return resp
	}
	s.release(from)
	t := time.NewTimer(hold)
	end := "timeout"
	select {
	case <-w.fired:
		end = "fired"
	case <-t.C:
	case <-s.quit:
		end = "shutdown"
	}
	t.Stop()
	s.watches.remove(from, m.Blob, w)
	s.reacquire(from)
	s.metrics.held.WithLabelValues(end).Inc()
	if end == "shutdown" {
		return resp
	}
	return s.route(from.String(), r, time.Now())
}

// holdFor is how long a route answered with resp may be held: the
// shortest RetryAfter of its waits, at most limit, or 0 when it names a
// parent or an origin turn (or is an error).
func holdFor(resp wire.Message, limit time.Duration) time.Duration {
	r, ok := resp.(*wire.Answer)
	if !ok {
		return 0
	}
	a := r.Answer
	if len(a.Parents) > 0 || len(a.Origin) > 0 || len(a.Wait) == 0 {
		return 0
	}
	d := limit
	for _, w := range a.Wait {
		d = min(d, w.RetryAfter)
	}
	return d
}

// errorResponse maps a core error to the protocol's codes.
func errorResponse(err error) *wire.Error {
	code := wire.CodeInternal
	switch {
	case errors.Is(err, scheduler.ErrUnknownPeer):
		code = wire.CodeUnknownPeer
	case errors.Is(err, scheduler.ErrRateLimited):
		code = wire.CodeRateLimited
	case errors.Is(err, scheduler.ErrBanned):
		code = wire.CodeBanned
	case errors.Is(err, scheduler.ErrLimit):
		code = wire.CodeLimit
	case errors.Is(err, scheduler.ErrTooManyPeers):
		code = wire.CodeTooManyPeers
	case errors.Is(err, scheduler.ErrInvalid), errors.Is(err, scheduler.ErrNoAssignment):
		code = wire.CodeBadRequest
	}
	return &wire.Error{Code: code, Message: err.Error()}
}
