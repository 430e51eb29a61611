package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// Server is a scheduler daemon. New starts listening; Run serves until
// its context is done, then closes everything.
type Server struct {
	cfg     Config
	log     *slog.Logger
	state   *scheduler.State
	host    host.Host
	admin   net.Listener
	httpSrv *http.Server
	metrics *metrics
	watches *watches      // held routes (watch.go)
	quit    chan struct{} // closed when Run stops: held routes answer

	mu        sync.Mutex
	closed    bool
	perPeer   map[peer.ID]int
	active    int
	sessions  map[peer.ID]int // session streams open, by peer (handleSession)
	nsessions int
	limiters  map[peer.ID]*rate.Limiter // per peer, with RequestsPerPeer
	streams   sync.WaitGroup
}

// New validates cfg and starts the admin listener, and returns a Server
// ready to Run on h, the node's libp2p host in the cluster (package
// peer/host builds it; the daemon's assembly passes it in, so that the
// scheduler depends on no peer package). The Server owns h: Run closes
// it, and so does New when it fails. reg is the Prometheus registry the
// admin API serves at /metrics, the one h's metrics went to; nil means a
// new one. log may be nil.
func New(cfg Config, h host.Host, reg *prometheus.Registry, log *slog.Logger) (*Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		h.Close()
		return nil, err
	}
	// Seeded at random so that schedulers break ties differently.
	state, err := scheduler.New(cfg.State, rand.NewPCG(rand.Uint64(), rand.Uint64()))
	if err != nil {
		h.Close()
		return nil, err
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	s := &Server{cfg: cfg, log: log, state: state, host: h, perPeer: make(map[peer.ID]int), sessions: make(map[peer.ID]int), limiters: make(map[peer.ID]*rate.Limiter), watches: newWatches(), quit: make(chan struct{})}
	s.metrics = newMetrics(reg, state, s.HeldRoutes, s.Sessions)
	s.admin, err = net.Listen("tcp", cfg.Admin.Listen)
	if err != nil {
		s.host.Close()
		return nil, fmt.Errorf("admin API: %w", err)
	}
	s.httpSrv = &http.Server{
		Handler:           s.adminHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		ReadTimeout:       10 * time.Second,
		WriteTimeout:      30 * time.Second,
		IdleTimeout:       time.Minute,
		MaxHeaderBytes:    64 << 10,
		ErrorLog:          newStdLogger(log),
	}
	return s, nil
}

// HeldRoutes returns how many RouteWait requests the server holds now.
func (s *Server) HeldRoutes() int { return s.watches.len() }

// Sessions returns how many session streams that may carry more than one
// request are open now (handleSession).
func (s *Server) Sessions() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.nsessions
}

// State returns the scheduler core the server drives.
func (s *Server) State() *scheduler.State { return s.state }

// AddrInfo returns the scheduler's peer ID and addresses, as peers need
// them to connect.
func (s *Server) AddrInfo() peer.AddrInfo {
	return peer.AddrInfo{ID: s.host.ID(), Addrs: s.host.Addrs()}
}

// AdminURL returns the admin API's base URL, such as http://127.0.0.1:7947.
func (s *Server) AdminURL() string { return "http://" + s.admin.Addr().String() }

// Run serves the scheduler protocol and the admin API until ctx is done,
// then stops taking streams, waits for those in progress, and closes the
// admin server and the host. It returns nil after a clean shutdown.
func (s *Server) Run(ctx context.Context) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	s.host.SetStreamHandler(wire.ProtocolID, s.handle)
	s.host.SetStreamHandler(wire.SessionProtocolID, s.handleSession)
	s.log.Info("scheduler serving", "peer", s.host.ID(), "addrs", s.host.Addrs(), "admin", s.AdminURL())

	var wg sync.WaitGroup
	var httpErr error
	wg.Add(2)
	go func() {
		defer wg.Done()
		if err := s.httpSrv.Serve(s.admin); !errors.Is(err, http.ErrServerClosed) {
			httpErr = fmt.Errorf("admin API: %w", err)
			cancel() // a dead admin API stops the daemon
		}
	}()
	go func() {
		defer wg.Done()
		s.expireLoop(ctx)
	}()
	<-ctx.Done()

	// Shut down in reverse order of start: no new streams, the admin API,
	// the host (which resets streams in progress), then wait for all.
	s.host.RemoveStreamHandler(wire.ProtocolID)
	s.host.RemoveStreamHandler(wire.SessionProtocolID)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	close(s.quit)
	sctx, scancel := context.WithTimeout(context.Background(), 5*time.Second)
	if err := s.httpSrv.Shutdown(sctx); err != nil {
		s.httpSrv.Close()
	}
	scancel()
	hostErr := s.host.Close()
	if hostErr != nil {
		hostErr = fmt.Errorf("close host: %w", hostErr)
	}
	s.streams.Wait()
	wg.Wait()
	return errors.Join(httpErr, hostErr)
}

// expireLoop drops silent peers every ExpireInterval until ctx is done.
func (s *Server) expireLoop(ctx context.Context) {
	t := time.NewTicker(s.cfg.ExpireInterval)
	defer t.Stop()
	ranOut := s.state.OriginTurnsRanOut()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s.sweepLimiters(now)
			if gone := s.state.Expire(now); len(gone) > 0 {
				s.metrics.expired.Add(float64(len(gone)))
				s.log.Info("peers expired", "peers", gone)
			}
			// Turns run out only when a fetcher stalled or lost the
			// chunk without telling: worth an operator's look.
			if n := s.state.OriginTurnsRanOut(); n > ranOut {
				s.log.Warn("origin turns ran out undelivered", "turns", n-ranOut)
				ranOut = n
			}
		}
	}
}

// newStdLogger routes net/http's internal messages to log at debug level.
func newStdLogger(l *slog.Logger) *log.Logger {
	return log.New(writerFunc(func(p []byte) (int, error) {
		l.Debug("admin http", "msg", string(p))
		return len(p), nil
	}), "", 0)
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

var _ io.Writer = writerFunc(nil)
