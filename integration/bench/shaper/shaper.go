// Package shaper is a TCP proxy on 127.0.0.1 that makes a loopback
// connection look like a network link, for benchmarks whose numbers must
// mean something beyond loopback (the kernel here has no `tc netem`).
//
// A [Proxy] forwards every connection it accepts to one upstream address.
// Each direction of the link (up: client to upstream; down: upstream to
// client) has one token bucket shared by all connections, like one NIC,
// and every piece of data is delivered RTT/2 after it passed the bucket,
// like propagation delay. A new connection's first bytes toward upstream
// wait one more RTT, the TCP handshake a real client pays before it can
// send. TCP slow start and loss are not modelled.
//
// The parts: shaper.go (the proxy and its connections), link.go (the
// bucket and the delay line of one direction).
package shaper

import (
	"context"
	"errors"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// Config describes the emulated link.
type Config struct {
	// Bandwidth is the link rate in bits per second, in each direction,
	// shared by all connections; 0 means unlimited.
	Bandwidth int64
	// RTT is the round-trip time added to loopback's: RTT/2 each way.
	RTT time.Duration
	// Segment is the most bytes forwarded as one piece; 0 means 16 KiB.
	Segment int
}

// String says "200 Mbit/s, 20ms RTT".
func (c Config) String() string {
	bw := "unlimited"
	switch {
	case c.Bandwidth >= 1e9 && c.Bandwidth%1e9 == 0:
		bw = fmt.Sprintf("%d Gbit/s", c.Bandwidth/1e9)
	case c.Bandwidth > 0:
		bw = fmt.Sprintf("%g Mbit/s", float64(c.Bandwidth)/1e6)
	}
	return fmt.Sprintf("%s, %s RTT", bw, c.RTT)
}

// Stats counts what a Proxy forwarded.
type Stats struct {
	Conns     int64 // connections accepted
	UpBytes   int64 // client to upstream
	DownBytes int64 // upstream to client
}

// Proxy is a shaping TCP proxy. Create it with New, serve with Run.
type Proxy struct {
	cfg      Config
	upstream string
	ln       net.Listener
	up, down *link

	conns atomic.Int64
	mu    sync.Mutex
	open  map[*pair]struct{}
	wg    sync.WaitGroup
}

// New listens on a free port of 127.0.0.1 for connections to forward to
// upstream (host:port). Nothing is accepted until Run.
func New(upstream string, cfg Config) (*Proxy, error) {
	if cfg.Bandwidth < 0 || cfg.RTT < 0 || cfg.Segment < 0 {
		return nil, errors.New("shaper: negative bandwidth, RTT or segment size")
	}
	if cfg.Segment == 0 {
		cfg.Segment = 16 << 10
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("shaper: %w", err)
	}
	return &Proxy{cfg: cfg, upstream: upstream, ln: ln, open: map[*pair]struct{}{},
		up: newLink(cfg), down: newLink(cfg)}, nil
}

// Addr is the proxy's "127.0.0.1:PORT".
func (p *Proxy) Addr() string { return p.ln.Addr().String() }

// Config is the link the proxy emulates.
func (p *Proxy) Config() Config { return p.cfg }

// Stats snapshots the counters.
func (p *Proxy) Stats() Stats {
	return Stats{Conns: p.conns.Load(), UpBytes: p.up.bytes.Load(), DownBytes: p.down.bytes.Load()}
}

// Run accepts and forwards connections until ctx ends, then closes the
// listener and every connection and returns once all its goroutines have
// stopped. It returns nil after ctx ends, or the listener's error.
func (p *Proxy) Run(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() { p.ln.Close() })
	defer stop()
	var err error
	for {
		var c net.Conn
		c, err = p.ln.Accept()
		if err != nil {
			break
		}
		p.conns.Add(1)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			p.serve(ctx, c.(*net.TCPConn))
		}()
	}
	p.ln.Close()
	p.mu.Lock()
	for pr := range p.open {
		pr.close()
	}
	p.mu.Unlock()
	p.wg.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

// pair is one proxied connection: the client's and upstream's ends.
type pair struct {
	client, server *net.TCPConn
	once           sync.Once
}

func (pr *pair) close() {
	pr.once.Do(func() {
		pr.client.Close()
		pr.server.Close()
	})
}

func (p *Proxy) serve(ctx context.Context, client *net.TCPConn) {
	accepted := time.Now()
	var d net.Dialer
	sc, err := d.DialContext(ctx, "tcp", p.upstream)
	if err != nil {
		client.Close()
		return
	}
	pr := &pair{client: client, server: sc.(*net.TCPConn)}
	p.mu.Lock()
	if ctx.Err() != nil {
		p.mu.Unlock()
		pr.close()
		return
	}
	p.open[pr] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.open, pr)
		p.mu.Unlock()
		pr.close()
	}()
	// The first bytes toward upstream leave one RTT after the connect
	// began: the handshake a real client waits for.
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); p.up.forward(pr, pr.client, pr.server, accepted.Add(p.cfg.RTT)) }()
	go func() { defer wg.Done(); p.down.forward(pr, pr.server, pr.client, time.Time{}) }()
	wg.Wait()
}
