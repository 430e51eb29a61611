package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"sync/atomic"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// HeaderRegistry names the upstream registry ("scheme://host") on requests
// to the proxy, so one mirror can serve several registries.
const HeaderRegistry = "X-Damselfly-Registry"

// proxy is the local peer's registry mirror and its health: healthy while
// PingURL answers 200. The checker goroutine probes every CheckInterval;
// a request that finds the proxy down marks it unhealthy at once. Every
// change is logged once.
type proxy struct {
	url     string // base URL without a trailing slash
	shown   string // url without its password, for logs
	pingURL string
	client  *http.Client
	log     *slog.Logger
	healthy atomic.Bool
	chunks  *chunkapi.Client // the batch endpoint
	noBatch atomic.Bool      // the proxy answered the batch endpoint 404, 405 or 501
	// closeIdle closes the idle connections of a transport of the
	// proxy's own (a unix socket's).
	closeIdle func()
}

func newProxy(cfg ProxyConfig, base http.RoundTripper, log *slog.Logger) *proxy {
	p := &proxy{
		url:       strings.TrimRight(cfg.URL, "/"),
		pingURL:   cfg.PingURL,
		client:    &http.Client{Transport: base},
		log:       log,
		closeIdle: func() {},
	}
	if _, ok, _ := chunkapi.SocketPath(cfg.URL); ok {
		// Validate has checked the URL. Every request goes to the
		// socket; ping_url is a path on it.
		bt, _ := base.(*http.Transport)
		u, t, _ := chunkapi.Endpoint(cfg.URL, bt)
		p.url, p.pingURL = u, u+cfg.PingURL
		p.client = &http.Client{Transport: t}
		p.closeIdle = t.CloseIdleConnections
	}
	p.shown = RedactURL(p.url)
	p.chunks = chunkapi.NewClient(p.url, p.client)
	// Optimistic until told otherwise: the first read tries the proxy, and
	// a proxy that is down costs it one refused connection.
	p.healthy.Store(true)
	return p
}

// read fills p with bytes [off, off+len(p)) of blob d of repo at reg,
// forwarding authorization (may be empty) for the mirror to use upstream.
func (p *proxy) read(ctx context.Context, reg *regClient, d rafs.Digest, off int64, buf []byte) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.url+reg.blobPath(d), nil)
	if err != nil {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	req.Header.Set("Range", rangeHeader(off, len(buf)))
	req.Header.Set(HeaderRegistry, reg.origin())
	if a := reg.authorization(); a != "" {
		req.Header.Set("Authorization", a)
	}
	return doRange(p.client, req, off, buf)
}

// setHealthy records the proxy's state and logs a change; why says what
// showed it.
func (p *proxy) setHealthy(ok bool, why error) {
	if !p.healthy.CompareAndSwap(!ok, ok) {
		return
	}
	if ok {
		// It may have restarted as a peer that speaks the batch protocol.
		p.noBatch.Store(false)
		p.log.Info("backend proxy healthy: requests go to the proxy", "proxy", p.shown)
	} else {
		p.log.Warn("backend proxy unhealthy", "proxy", p.shown, "err", why)
	}
}

// run probes the proxy every interval until ctx ends.
func (p *proxy) run(ctx context.Context, clock Clock, interval, timeout time.Duration) {
	for {
		p.setHealthyFromProbe(ctx, timeout)
		select {
		case <-ctx.Done():
			return
		case <-clock.After(interval):
		}
	}
}

func (p *proxy) setHealthyFromProbe(ctx context.Context, timeout time.Duration) {
	pctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	err := p.probe(pctx)
	if ctx.Err() != nil {
		return // shutting down: no verdict
	}
	p.setHealthy(err == nil, err)
}

// probe is one health check: nil if PingURL answered 200.
func (p *proxy) probe(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.pingURL, nil)
	if err != nil {
		return err
	}
	resp, err := p.client.Do(req)
	if err != nil {
		return fmt.Errorf("health check: %w", err)
	}
	defer func() {
		io.CopyN(io.Discard, resp.Body, maxErrorBody)
		resp.Body.Close()
	}()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("health check %s: %w", p.pingURL, newStatusError(resp))
	}
	return nil
}

// noBatchEndpoint reports whether err is the proxy answering the batch
// request itself with 404, 405 or 501: it does not speak the protocol.
func noBatchEndpoint(err error) bool {
	var (
		ce *chunkapi.ChunkError
		se *registry.StatusError
	)
	if !errors.As(err, &ce) || !errors.As(ce.Err, &se) {
		return false
	}
	return se.Code == http.StatusNotFound || se.Code == http.StatusMethodNotAllowed || se.Code == http.StatusNotImplemented
}

// chunkErr marks a ChunkError that is not transient as permanent for the
// read loop. deliver's own errors pass through unchanged.
func chunkErr(err error) error {
	var (
		ce *chunkapi.ChunkError
		de *deliverError
	)
	if err == nil || errors.As(err, &de) || !errors.As(err, &ce) || ce.Transient {
		return err
	}
	return fmt.Errorf("%w: %w", errPermanent, err)
}
