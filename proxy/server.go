package proxy

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"damselfly/rafs/chunkapi"
	"damselfly/rafs/manifests"
	"damselfly/rafs/registry"
)

// Option adds an optional part to a Server.
type Option func(*Server)

// WithBlobs has the mirror serve plain blob GETs from bs (the node cache
// and peers) when it can; without it they pass through from the origin.
func WithBlobs(bs BlobSource) Option { return func(s *Server) { s.blobs = bs } }

// WithManifests has the mirror keep the manifests the origin serves in
// st and answer from it while the origin cannot be reached (manifests.go).
// Without it manifests only pass through.
func WithManifests(st *manifests.Store) Option { return func(s *Server) { s.manifests = st } }

// WithManifestPeers has the mirror ask other peers, through mp, for the
// manifests and tag resolutions its store lacks while the origin cannot
// be reached (manifests.go). It needs WithManifests.
func WithManifestPeers(mp ManifestPeers) Option { return func(s *Server) { s.mpeers = mp } }

// PublicAt says when the registry last let anonymous clients pull from
// repo at registry, as far as this node saw within Config.AuthStale (for
// other peers: peer/manifestshare).
func (s *Server) PublicAt(registry, repo string) (time.Time, bool) {
	return s.gate.publicAt(registry, repo)
}

// WithStatus serves GET /status as the JSON of what status returns (the
// peer daemon's state, for "damselfly peer status").
func WithStatus(status func() any) Option { return func(s *Server) { s.status = status } }

// Server is the peer's HTTP endpoint. Create it with New, bind with
// Listen, run with Serve.
type Server struct {
	cfg    Config
	chunks ChunkSource
	blobs  BlobSource // nil: plain blobs pass through from the origin
	status func() any // GET /status; nil: none
	recent recentPulls
	up     *registry.Client
	log    *slog.Logger
	m      *metrics
	srv    *http.Server
	gate   *gate

	manifests *manifests.Store // kept for outages; nil: none kept
	mpeers    ManifestPeers    // asked for what manifests lacks; nil: none

	mu  sync.Mutex
	lns []net.Listener
	url string
}

// New returns a Server that takes chunks from chunks and talks to
// registries through up. Its metrics are registered with reg (nil: a
// registry of its own); /metrics serves reg if it is also a
// prometheus.Gatherer (a *prometheus.Registry is). log may be nil.
func New(cfg Config, chunks ChunkSource, up *registry.Client, reg prometheus.Registerer, log *slog.Logger, opts ...Option) (*Server, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("proxy config: %w", err)
	}
	if chunks == nil || up == nil {
		return nil, errors.New("proxy: a ChunkSource and an upstream client are required")
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	key, err := loadGrantKey(cfg.GrantKeyFile)
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, chunks: chunks, up: up, log: log, m: m, gate: newGate(up, cfg.AuthTTL, cfg.AuthStale, key)}
	for _, o := range opts {
		o(s)
	}
	if s.manifests != nil {
		s.gate.refs = s.manifests.References
	}
	if s.mpeers != nil {
		s.gate.public = func(ctx context.Context, registry, repo, object string) (time.Time, bool) {
			at, err := s.mpeers.Public(ctx, registry, repo, object)
			return at, err == nil
		}
	}

	mux := http.NewServeMux()
	mux.Handle("GET /healthz", m.instrument("healthz", cfg.WriteStallTimeout, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Write([]byte("ok"))
	})))
	if s.status != nil {
		mux.Handle("GET /status", m.instrument("status", cfg.WriteStallTimeout, http.HandlerFunc(s.serveStatus)))
	}
	if g, ok := reg.(prometheus.Gatherer); ok {
		mux.Handle("GET /metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{}))
	}
	mux.Handle("POST /api/v1/chunks", m.instrument("chunks", cfg.WriteStallTimeout, http.HandlerFunc(s.serveChunks)))
	mux.Handle("POST "+chunkapi.GrantsPath, m.instrument("grants", cfg.WriteStallTimeout, http.HandlerFunc(s.serveGrants)))
	mux.Handle("/v2/", m.instrument("v2", cfg.WriteStallTimeout, http.HandlerFunc(s.serveV2)))

	s.srv = &http.Server{
		Handler:           mux,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(log.Handler(), slog.LevelDebug),
	}
	return s, nil
}

// Listen binds cfg.Listen and, if set, cfg.UnixSocket (a stale socket
// file there, one nobody answers on, is replaced; the socket is made
// accessible to its owner and group only). Calling it again is a no-op.
func (s *Server) Listen() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lns != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.cfg.Listen)
	if err != nil {
		return fmt.Errorf("proxy listen %s: %w", s.cfg.Listen, err)
	}
	lns := []net.Listener{ln}
	if p := s.cfg.UnixSocket; p != "" {
		if fi, err := os.Lstat(p); err == nil && fi.Mode().Type() == fs.ModeSocket {
			if c, err := net.DialTimeout("unix", p, time.Second); err == nil {
				c.Close()
				ln.Close()
				return fmt.Errorf("proxy listen %s: another process serves it", p)
			}
			os.Remove(p)
		}
		uln, err := net.Listen("unix", p)
		if err != nil {
			ln.Close()
			return fmt.Errorf("proxy listen %s: %w", p, err)
		}
		if err := os.Chmod(p, 0o660); err != nil {
			ln.Close()
			uln.Close()
			return fmt.Errorf("proxy socket %s: %w", p, err)
		}
		lns = append(lns, bufferedListener{uln})
	}
	s.lns = lns
	s.url = "http://" + ln.Addr().String()
	return nil
}

// URL is the TCP endpoint's base URL, "http://127.0.0.1:PORT"; empty
// before Listen.
func (s *Server) URL() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.url
}

// Serve serves until ctx is done (calling Listen first if needed), then
// shuts down gracefully: new connections are refused and requests in
// flight get ShutdownTimeout to finish before their connections are
// closed. It returns nil after a shutdown asked for by ctx, or the error
// that stopped a listener. Call it once.
func (s *Server) Serve(ctx context.Context) error {
	if err := s.Listen(); err != nil {
		return err
	}
	s.mu.Lock()
	lns := s.lns
	s.mu.Unlock()

	s.srv.BaseContext = func(net.Listener) context.Context { return context.WithoutCancel(ctx) }
	errc := make(chan error, len(lns))
	var wg sync.WaitGroup
	for _, ln := range lns {
		wg.Go(func() { errc <- s.srv.Serve(ln) })
	}
	s.log.Info("proxy serving", "url", s.URL(), "unix_socket", s.cfg.UnixSocket)

	var serveErr error
	select {
	case <-ctx.Done():
	case serveErr = <-errc:
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.ShutdownTimeout)
	defer cancel()
	err := s.srv.Shutdown(sctx)
	if err != nil {
		err = errors.Join(err, s.srv.Close())
	}
	wg.Wait()
	close(errc)
	for e := range errc {
		if serveErr == nil && !errors.Is(e, http.ErrServerClosed) {
			serveErr = e
		}
	}
	if s.cfg.UnixSocket != "" {
		os.Remove(s.cfg.UnixSocket)
	}
	if serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		return fmt.Errorf("proxy serve: %w", serveErr)
	}
	if err != nil {
		return fmt.Errorf("proxy shutdown: %w", err)
	}
	return nil
}

// unixSendBuffer is the send buffer of a connection on the unix socket.
// The default (208 KiB here) has the sender wait for the reader about 20
// times per 4 MiB batch response; loopback TCP grows its own to 4 MiB.
const unixSendBuffer = 4 << 20

// bufferedListener gives each accepted unix connection unixSendBuffer
// (the kernel caps it at net.core.wmem_max).
type bufferedListener struct{ net.Listener }

func (l bufferedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if uc, ok := c.(*net.UnixConn); ok {
		_ = uc.SetWriteBuffer(unixSendBuffer)
	}
	return c, err
}
