// Package manifestshare lets peers answer each other for image manifests
// and tag resolutions, so that a node whose mirror cannot reach the
// origin registry can still serve a manifest another node of the cluster
// holds (issue 21; the mirror's side is proxy/manifests.go).
//
// Finding holders: each manifest and tag resolution in a node's store
// (rafs/manifests) is announced to the scheduler as chunk 0 of a blob
// whose digest is derived from the store's Name for it (HoldKey), so the
// scheduler's holdings, sessions and re-announcements after a restart
// carry them like chunks, and a Route for that key names a holder. A
// question for a tag is asked of that holder and of the peers this node
// is connected to (up to Config.MaxAsked), and the youngest resolution
// among the answers wins. Without a scheduler only connected peers are
// asked.
//
// Trust: a manifest from a peer is kept and served only if its sha256 is
// the digest asked for (or the tag's resolution); a resolution dated in
// the future is refused. Peers are cluster members (the libp2p host only
// connects those); who may be served a manifest is the mirror's gate's
// decision, made before peers are asked.
package manifestshare

import (
	"bufio"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"damselfly/rafs"
	"damselfly/rafs/manifests"
	"damselfly/rafs/route"
)

// Protocol is the libp2p protocol of the questions.
const Protocol protocol.ID = "/damselfly/manifests/1.0.0"

// maxSkew is how far in the future a peer's resolution time may be (the
// clocks of two nodes differ) before it is refused as bogus.
const maxSkew = time.Minute

// ErrNotFound is returned when no peer asked holds what was asked for.
var ErrNotFound = errors.New("no peer holds it")

// Router is the part of the scheduler client the share uses
// (fetch.Router has it).
type Router interface {
	Route(ctx context.Context, blob rafs.Digest, chunks []uint32, bytes uint64) (route.Route, error)
	Announce(blob rafs.Digest, chunks []uint32)
	Drop(blob rafs.Digest, chunks []uint32)
	Abandon(blob rafs.Digest, chunks []uint32)
}

// Config bounds the share. Zero fields take the defaults.
type Config struct {
	// AskTimeout bounds one question to the cluster: the route and every
	// peer asked (3 s).
	AskTimeout time.Duration
	// MaxAsked bounds the peers asked for a tag at once (8).
	MaxAsked int
	// MaxServing bounds the questions served at once; more are answered
	// busy (32).
	MaxServing int
}

func (c Config) withDefaults() Config {
	if c.AskTimeout <= 0 {
		c.AskTimeout = 3 * time.Second
	}
	if c.MaxAsked <= 0 {
		c.MaxAsked = 8
	}
	if c.MaxServing <= 0 {
		c.MaxServing = 32
	}
	return c
}

// Share answers other peers from the node's store and asks them for what
// the store lacks. Safe for concurrent use.
type Share struct {
	h   host.Host
	st  *manifests.Store
	r   Router // nil: no scheduler
	cfg Config
	log *slog.Logger
	now func() time.Time

	serving chan struct{}
	mu      sync.Mutex
	closed  bool
	public  func(registry, repo string) (time.Time, bool)
}

// SetPublic has the share answer questions about public repositories
// with f: when this node last saw the registry let anonymous clients
// pull from repo (the mirror's gate knows). nil: never.
func (s *Share) SetPublic(f func(registry, repo string) (time.Time, bool)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.public = f
}

// Public asks peers when they last saw the registry let anonymous
// clients pull from repo at registry, and returns the latest answer.
// object (the tag or digest the client asked for) finds the peers to
// ask: those that hold it. It fails with ErrNotFound when no peer asked
// has seen it.
func (s *Share) Public(ctx context.Context, registry, repo, object string) (time.Time, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AskTimeout)
	defer cancel()
	q := request{kind: kindPublic, registry: registry, repo: repo, object: object}
	if err := q.validate(); err != nil {
		return time.Time{}, err
	}
	var latest time.Time
	for _, a := range s.askAll(ctx, q) {
		if a.a.tag.At.After(latest) {
			latest = a.a.tag.At
		}
	}
	if latest.IsZero() {
		return latest, ErrNotFound
	}
	return latest, nil
}

// answered is an ok answer and who gave it.
type answered struct {
	p peer.ID
	a answer
}

// askAll puts q to its candidates at once and returns the ok answers.
func (s *Share) askAll(ctx context.Context, q request) []answered {
	ps := s.candidates(ctx, q, s.cfg.MaxAsked)
	answers := make(chan answered, len(ps))
	var wg sync.WaitGroup
	for _, p := range ps {
		wg.Go(func() {
			a, err := s.ask(ctx, p, q)
			if err != nil {
				s.log.Debug("manifest question failed", "peer", p.ID, "object", q.object, "err", err)
				return
			}
			if a.status == StatusOK {
				answers <- answered{p.ID, a}
			}
		})
	}
	wg.Wait()
	close(answers)
	var out []answered
	for a := range answers {
		out = append(out, a)
	}
	return out
}

// New serves st to other peers over h and, with a Router, announces what
// st holds (now and as it changes). r may be nil. log may be nil.
func New(h host.Host, st *manifests.Store, r Router, cfg Config, log *slog.Logger) *Share {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cfg = cfg.withDefaults()
	s := &Share{h: h, st: st, r: r, cfg: cfg, log: log, now: time.Now, serving: make(chan struct{}, cfg.MaxServing)}
	h.SetStreamHandler(Protocol, s.handle)
	if r != nil {
		st.SetHooks(manifests.Hooks{
			Added:   func(name string) { r.Announce(HoldKey(name), chunk0) },
			Dropped: func(name string) { r.Drop(HoldKey(name), chunk0) },
		})
		for _, name := range st.Names() {
			r.Announce(HoldKey(name), chunk0)
		}
	}
	return s
}

// Close stops serving and announcing. Questions in progress end on
// their own deadlines.
func (s *Share) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.h.RemoveStreamHandler(Protocol)
	s.st.SetHooks(manifests.Hooks{})
	return nil
}

var chunk0 = []uint32{0}

// HoldKey is the blob digest under which holders of the store entry name
// (manifests.Name) are announced.
func HoldKey(name string) rafs.Digest {
	return rafs.Digest(sha256.Sum256([]byte("damselfly manifest share v1\x00" + name)))
}

// Manifest asks peers for manifest digest of repo at registry, keeps it
// in the node's store and returns it. It fails with ErrNotFound when no
// peer asked holds it.
func (s *Share) Manifest(ctx context.Context, registry, repo, digest string) (manifests.Manifest, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AskTimeout)
	defer cancel()
	q := request{kind: kindManifest, registry: registry, repo: repo, object: digest}
	if err := q.validate(); err != nil {
		return manifests.Manifest{}, err
	}
	var errs []error
	for _, p := range s.candidates(ctx, q, 1) {
		a, err := s.ask(ctx, p, q)
		switch {
		case err != nil:
			errs = append(errs, fmt.Errorf("peer %s: %w", p.ID.ShortString(), err))
			continue
		case a.status != StatusOK:
			continue
		}
		if err := s.st.Put(registry, repo, *a.manifest); err != nil {
			s.log.Warn("manifest from a peer not kept", "peer", p.ID, "digest", digest, "err", err)
		}
		s.log.Info("manifest from a peer", "peer", p.ID, "registry", registry, "repo", repo, "digest", digest)
		return *a.manifest, nil
	}
	return manifests.Manifest{}, errors.Join(append([]error{ErrNotFound}, errs...)...)
}

// Tag asks peers for their resolution of tag in repo at registry and
// returns the youngest, kept in the node's store if it is younger than
// the store's (with its manifest, when the peer sent it). It fails with
// ErrNotFound when no peer asked holds one.
func (s *Share) Tag(ctx context.Context, registry, repo, tag string) (manifests.Tag, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.AskTimeout)
	defer cancel()
	q := request{kind: kindTag, registry: registry, repo: repo, object: tag}
	if err := q.validate(); err != nil {
		return manifests.Tag{}, err
	}
	var best *answered
	for _, r := range s.askAll(ctx, q) {
		switch {
		case best == nil, r.a.tag.At.After(best.a.tag.At),
			r.a.tag.At.Equal(best.a.tag.At) && best.a.manifest == nil && r.a.manifest != nil:
			best = &r
		}
	}
	if best == nil {
		return manifests.Tag{}, ErrNotFound
	}
	t := best.a.tag
	if m := best.a.manifest; m != nil {
		if err := s.st.Put(registry, repo, *m); err != nil {
			s.log.Warn("manifest from a peer not kept", "peer", best.p, "digest", m.Digest, "err", err)
		}
	}
	if _, err := s.st.KeepTag(t); err != nil {
		s.log.Warn("tag resolution from a peer not kept", "peer", best.p, "tag", tag, "err", err)
	}
	s.log.Info("tag resolution from a peer", "peer", best.p, "registry", registry, "repo", repo, "tag", tag, "digest", t.Digest, "resolved", t.At)
	return t, nil
}

// candidates are the peers to ask q: the holder the scheduler names,
// then (up to max in all) connected peers that speak the protocol.
func (s *Share) candidates(ctx context.Context, q request, max int) []peer.AddrInfo {
	seen := map[peer.ID]bool{s.h.ID(): true}
	var out []peer.AddrInfo
	if s.r != nil {
		key := HoldKey(manifests.Name(q.registry, q.repo, q.object))
		rctx, cancel := context.WithTimeout(ctx, s.cfg.AskTimeout/2)
		rt, err := s.r.Route(rctx, key, chunk0, 0)
		cancel()
		if err == nil {
			for _, p := range rt.Parents {
				if !seen[p.Info.ID] {
					seen[p.Info.ID] = true
					out = append(out, p.Info)
				}
			}
			// A turn at the origin is no use here: give it back at once.
			if len(rt.Origin) > 0 {
				s.r.Abandon(key, rt.Origin)
			}
		}
	}
	if q.kind == kindManifest && len(out) > 0 {
		max = len(out) + 2 // the holder, and a couple of others if it fails
	}
	for _, id := range s.h.Network().Peers() {
		if len(out) >= max {
			break
		}
		if seen[id] {
			continue
		}
		seen[id] = true
		if ok, err := s.h.Peerstore().SupportsProtocols(id, Protocol); err != nil || len(ok) == 0 {
			continue
		}
		out = append(out, peer.AddrInfo{ID: id})
	}
	return out
}

// ask puts q to p and reads its answer.
func (s *Share) ask(ctx context.Context, p peer.AddrInfo, q request) (answer, error) {
	if len(p.Addrs) > 0 {
		s.h.Peerstore().AddAddrs(p.ID, p.Addrs, time.Minute)
	}
	req, err := q.encode()
	if err != nil {
		return answer{}, err
	}
	st, err := s.h.NewStream(ctx, p.ID, Protocol)
	if err != nil {
		return answer{}, err
	}
	defer st.Close()
	if dl, ok := ctx.Deadline(); ok {
		st.SetDeadline(dl)
	}
	if _, err := st.Write(req); err != nil {
		st.Reset()
		return answer{}, err
	}
	if err := st.CloseWrite(); err != nil {
		st.Reset()
		return answer{}, err
	}
	a, err := readAnswer(bufio.NewReader(st), q, s.now())
	if err != nil {
		st.Reset()
		return answer{}, err
	}
	return a, nil
}

// serveTimeout bounds one question served.
const serveTimeout = 10 * time.Second

// handle serves one question.
func (s *Share) handle(st network.Stream) {
	defer st.Close()
	st.SetDeadline(time.Now().Add(serveTimeout))
	s.mu.Lock()
	closed := s.closed
	s.mu.Unlock()
	select {
	case s.serving <- struct{}{}:
		defer func() { <-s.serving }()
	default:
		closed = true
	}
	q, err := readRequest(bufio.NewReader(st))
	var a answer
	switch {
	case closed:
		a.status = StatusBusy
	case err != nil:
		s.log.Debug("bad manifest question", "peer", st.Conn().RemotePeer(), "err", err)
		a.status = StatusBad
	default:
		a = s.answer(q)
	}
	b, err := a.encode(q.kind)
	if err != nil {
		s.log.Warn("manifest answer not sent", "peer", st.Conn().RemotePeer(), "err", err)
		st.Reset()
		return
	}
	if _, err := st.Write(b); err != nil {
		st.Reset()
	}
}

// answer answers q from the store.
func (s *Share) answer(q request) answer {
	if q.kind == kindPublic {
		s.mu.Lock()
		f := s.public
		s.mu.Unlock()
		if f == nil {
			return answer{status: StatusNotHeld}
		}
		at, ok := f(q.registry, q.repo)
		if !ok {
			return answer{status: StatusNotHeld}
		}
		return answer{status: StatusOK, tag: manifests.Tag{At: at}}
	}
	digest := q.object
	var a answer
	if q.kind == kindTag {
		t, ok := s.st.Tag(q.registry, q.repo, q.object)
		if !ok {
			return answer{status: StatusNotHeld}
		}
		a.tag, digest = t, t.Digest
	}
	m, err := s.st.Get(q.registry, q.repo, digest)
	switch {
	case err == nil:
		a.manifest = &m
	case q.kind == kindManifest:
		return answer{status: StatusNotHeld}
	}
	a.status = StatusOK
	return a
}
