package backend

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// Backend reads stored blob bytes from a registry (through the local
// peer's proxy while it is healthy) or from an OCI layout. It is safe for
// concurrent use; Close stops its health checker.
type Backend struct {
	cfg   Config
	clock Clock

	reg   *regClient // type registry
	proxy *proxy     // nil without Proxy.URL
	oci   *ociBlobs  // type oci

	stats  counters
	closed atomic.Bool

	closeIdle   func()
	stopChecker context.CancelFunc
	checkerDone chan struct{}
	closeOnce   sync.Once
	closeErr    error
}

var _ rafs.BlobReader = (*Backend)(nil)

// Option configures New.
type Option func(*options)

type options struct {
	log      *slog.Logger
	clock    Clock
	rt       http.RoundTripper
	keychain authn.Keychain
}

// WithLogger sets the logger for proxy state changes; the default
// discards.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithClock sets the clock of the retry loop and the health checker.
func WithClock(c Clock) Option { return func(o *options) { o.clock = c } }

// WithTransport sets the HTTP transport below authentication, for the
// registry, the proxy and its health checks. The default is a clone of
// http.DefaultTransport with Config.ConnectTimeout, which Close releases.
func WithTransport(rt http.RoundTripper) Option { return func(o *options) { o.rt = rt } }

// WithKeychain sets where credentials come from when Config.Auth is empty;
// the default is authn.DefaultKeychain (the docker config file).
func WithKeychain(kc authn.Keychain) Option { return func(o *options) { o.keychain = kc } }

// New validates cfg (start from Default) and returns a
// Backend. It does not contact the registry: authentication happens on the
// first read, so a mount starts while the registry is down. With a proxy,
// New starts the health checker goroutine; Close stops it.
func New(cfg Config, opts ...Option) (*Backend, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("backend config: %w", err)
	}
	cfg = cfg.resolve()
	o := options{log: slog.New(slog.DiscardHandler), clock: realClock{}, keychain: authn.DefaultKeychain}
	for _, opt := range opts {
		opt(&o)
	}
	b := &Backend{cfg: cfg, clock: o.clock, closeIdle: func() {}}

	if cfg.Type == TypeOCI {
		oci, err := newOCIBlobs(cfg.Dir)
		if err != nil {
			return nil, fmt.Errorf("backend: %w", err)
		}
		b.oci = oci
		return b, nil
	}

	rt := o.rt
	if rt == nil {
		t := defaultTransport(cfg.ConnectTimeout)
		rt, b.closeIdle = t, t.CloseIdleConnections
	}
	reg, err := newRegistry(cfg, rt, o.keychain, o.log)
	if err != nil {
		return nil, fmt.Errorf("backend: %w", err)
	}
	b.reg = reg
	if cfg.Proxy.URL != "" {
		b.proxy = newProxy(cfg.Proxy, rt, o.log)
		ctx, cancel := context.WithCancel(context.Background())
		b.stopChecker, b.checkerDone = cancel, make(chan struct{})
		probeTimeout := min(cfg.Timeout, max(cfg.Proxy.CheckInterval, time.Second))
		go func() {
			defer close(b.checkerDone)
			b.proxy.run(ctx, b.clock, cfg.Proxy.CheckInterval, probeTimeout)
		}()
	}
	return b, nil
}

// defaultTransport is the project's registry transport (the dial guard
// of rafs/registry) with the connect timeout and more idle connections
// per host: a mount issues many concurrent ranged reads to one host.
func defaultTransport(connect time.Duration) *http.Transport {
	t := registry.NewTransport(connect, 0)
	t.MaxIdleConnsPerHost = 32
	return t
}

// newRegistry is the registry client of cfg's repository, over rt. The
// credentials are Config.Auth, else kc's, else none; plain http goes to
// the configured host when Config.Scheme says so.
func newRegistry(cfg Config, rt http.RoundTripper, kc authn.Keychain, log *slog.Logger) (*regClient, error) {
	var opts []name.Option
	if cfg.Scheme == "http" {
		opts = append(opts, name.Insecure)
	}
	repo, err := name.NewRepository(cfg.Host+"/"+cfg.Repo, opts...)
	if err != nil {
		return nil, fmt.Errorf("repository %s/%s: %w", cfg.Host, cfg.Repo, err)
	}
	r := &regClient{scheme: cfg.Scheme, repo: repo}
	rcfg := registry.Config{
		DefaultRegistry: r.origin(),
		Timeout:         cfg.Timeout,
		ConnectTimeout:  cfg.ConnectTimeout,
		// The Backend's retry loop does the retrying (ReadRangeOnce);
		// this bounds only Check's, for Authorize.
		RetryLimit: cfg.RetryLimit,
	}
	if cfg.Scheme == "http" {
		rcfg.PlainHTTP = []string{repo.RegistryStr()}
	}
	ropts := []registry.Option{registry.WithTransport(rt)}
	if cfg.Auth != "" {
		if _, _, err := decodeAuth(cfg.Auth.Reveal()); err != nil {
			return nil, fmt.Errorf("auth: %w", err)
		}
		r.staticAuth = "Basic " + cfg.Auth.Reveal()
	} else {
		ropts = append(ropts, registry.WithKeychain(kc))
	}
	if r.client, err = registry.New(rcfg, log, ropts...); err != nil {
		return nil, err
	}
	return r, nil
}

// ReadBlob implements rafs.BlobReader: it fills p with exactly bytes
// [off, off+len(p)) of blob, or returns an error (a *ReadError) and leaves
// p's contents unspecified. See ReadBlobFrom.
func (b *Backend) ReadBlob(ctx context.Context, blob rafs.Blob, off int64, p []byte) error {
	_, err := b.ReadBlobFrom(ctx, blob, off, p)
	return err
}

// ReadBlobFrom is ReadBlob that also says which source served the bytes,
// or, on error, which source the last attempt went to. It blocks while it
// retries transient failures, up to Config.Deadline, and returns promptly
// with an error wrapping ctx.Err() when ctx ends. Errors fail fast,
// wrapping ErrNotFound, ErrRange, ErrBadRequest or ErrUnauthorized, when
// retrying cannot help; ErrDeadline when the deadline passed; ErrClosed
// after Close. The bytes are not verified: a range of a blob cannot be
// checked against the blob's digest (the caller checks chunk digests).
// Safe for concurrent use; p belongs to the caller again on return.
func (b *Backend) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (Source, error) {
	switch {
	case b.closed.Load():
		return "", b.readError(blob, off, p, "", 0, 0, ErrClosed)
	case off < 0:
		return "", b.readError(blob, off, p, "", 0, 0, fmt.Errorf("%w: negative offset", ErrRange))
	case blob.CompressedSize > 0 && uint64(off)+uint64(len(p)) > blob.CompressedSize:
		return "", b.readError(blob, off, p, "", 0, 0,
			fmt.Errorf("%w: the blob has %d bytes", ErrRange, blob.CompressedSize))
	}
	if b.oci != nil {
		return SourceOCI, b.readOCI(ctx, blob, off, p)
	}
	if len(p) == 0 {
		return b.choose(false, false), nil
	}
	return b.readRemote(ctx, blob, off, p)
}

func (b *Backend) readOCI(ctx context.Context, blob rafs.Blob, off int64, p []byte) error {
	st := &b.stats.oci
	st.requests.Add(1)
	if err := b.oci.read(ctx, blob.Digest, off, p); err != nil {
		st.errors.Add(1)
		return b.readError(blob, off, p, SourceOCI, 1, 0, err)
	}
	st.bytes.Add(uint64(len(p)))
	return nil
}

// readError describes a failed read.
func (b *Backend) readError(blob rafs.Blob, off int64, p []byte, src Source, attempts int, elapsed time.Duration, err error) *ReadError {
	e := &ReadError{Source: src, Digest: blob.Digest, Off: off, Len: int64(len(p)), Attempts: attempts, Elapsed: elapsed, Err: err}
	switch {
	case b.oci != nil:
		e.Dir = b.cfg.Dir
	default:
		e.Registry, e.Repo = b.reg.origin(), b.reg.repo.RepositoryStr()
		if b.proxy != nil {
			e.Proxy = b.proxy.url
		}
	}
	return e
}

// Stats returns a snapshot of the counters.
func (b *Backend) Stats() Stats {
	s := Stats{
		Proxy:     b.stats.proxy.snapshot(),
		Registry:  b.stats.registry.snapshot(),
		OCI:       b.stats.oci.snapshot(),
		Fallbacks: b.stats.fallbacks.Load(),
	}
	if b.proxy != nil {
		s.ProxyHealthy = b.proxy.healthy.Load()
	}
	return s
}

// Close stops the health checker, closes the OCI layout's files (those in
// use when their reads finish) and idle connections. Reads after Close
// fail with ErrClosed. It is safe to call more than once.
func (b *Backend) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.stopChecker != nil {
			b.stopChecker()
			<-b.checkerDone
		}
		if b.oci != nil {
			b.closeErr = b.oci.close()
		}
		b.closeIdle()
		if b.proxy != nil {
			b.proxy.closeIdle()
		}
		if b.closeErr != nil {
			b.closeErr = fmt.Errorf("close backend: %w", b.closeErr)
		}
	})
	return b.closeErr
}
