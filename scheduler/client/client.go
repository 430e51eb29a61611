package client

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/peerstore"

	"damselfly/rafs"
	"damselfly/scheduler"
)

// Client is a peer's connection to its schedulers. It implements
// the fetch engine's Router (its route types are rafs/route); Run keeps the memberships and delivers what Announce, Drop,
// Abandon and Report queue. All methods are safe for concurrent use.
type Client struct {
	h       host.Host
	cfg     Config
	log     *slog.Logger
	remotes []*remote
	byName  map[string]*remote
	load    atomic.Pointer[func() scheduler.Load]
	kick    chan struct{} // wakes the flush loop; capacity 1

	mu    sync.Mutex
	blobs map[rafs.Digest]*holding
	dirty map[rafs.Digest]struct{} // blobs with something to deliver
	ops   []op                     // Abandon and Report, oldest first
}

// remote is one scheduler. Its flags are guarded by Client.mu.
type remote struct {
	info peer.AddrInfo
	name string        // its peer ID, the name Pick hashes
	wake chan struct{} // asks its worker to act now; capacity 1
	// sessions are the idle session streams to it (call.go); their own
	// lock.
	sessions sessions

	alive      bool   // counted among the live schedulers
	noHold     bool   // answered RouteWait as an unknown request (an older scheduler)
	unsized    bool   // refused a route's size (an older scheduler)
	registered bool   // holds a session for this peer
	failures   int    // heartbeats failed in a row
	session    uint64 // counts registrations
}

// New returns a client of the schedulers in cfg, speaking from h. It adds
// the schedulers' addresses to h's peerstore and protects their
// connections from trimming. log may be nil. Run starts it.
func New(h host.Host, cfg Config, log *slog.Logger) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	c := &Client{
		h: h, cfg: cfg, log: log,
		byName: make(map[string]*remote),
		kick:   make(chan struct{}, 1),
		blobs:  make(map[rafs.Digest]*holding),
		dirty:  make(map[rafs.Digest]struct{}),
	}
	for _, s := range cfg.Schedulers {
		ai, _ := parseScheduler(s) // Validate parsed it
		if ai.ID == h.ID() {
			return nil, fmt.Errorf("scheduler client: scheduler %s is this peer", ai.ID)
		}
		if r, ok := c.byName[ai.ID.String()]; ok {
			r.info.Addrs = append(r.info.Addrs, ai.Addrs...)
			continue
		}
		// Taken as alive until heartbeats say otherwise, so that the
		// first queries do not wait for the first round of them.
		r := &remote{info: *ai, name: ai.ID.String(), wake: make(chan struct{}, 1), alive: true}
		c.remotes = append(c.remotes, r)
		c.byName[r.name] = r
	}
	for _, r := range c.remotes {
		h.Peerstore().AddAddrs(r.info.ID, r.info.Addrs, peerstore.PermanentAddrTTL)
		h.ConnManager().Protect(r.info.ID, "damselfly-scheduler")
	}
	return c, nil
}

// SetLoad sets the function heartbeats take the peer's load from. It may
// be called at any time; f must be safe for concurrent use and fast.
func (c *Client) SetLoad(f func() scheduler.Load) {
	c.load.Store(&f)
}

func (c *Client) currentLoad() scheduler.Load {
	if f := c.load.Load(); f != nil && *f != nil {
		return (*f)()
	}
	return scheduler.Load{}
}

// Run registers with every scheduler, keeps the sessions alive with
// heartbeats and delivers queued messages until ctx is done. Then it
// unregisters (best effort, bounded by RequestTimeout) and returns nil.
func (c *Client) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, r := range c.remotes {
		wg.Go(func() { c.runRemote(ctx, r) })
	}
	wg.Go(func() { c.flushLoop(ctx) })
	wg.Wait()
	c.unregisterAll()
	for _, r := range c.remotes {
		r.sessions.close()
		c.h.ConnManager().Unprotect(r.info.ID, "damselfly-scheduler")
	}
	return nil
}

// signal wakes the flush loop.
func (c *Client) signal() {
	select {
	case c.kick <- struct{}{}:
	default:
	}
}

// liveLocked returns the names of the live schedulers. c.mu is held.
func (c *Client) liveLocked() []string {
	names := make([]string, 0, len(c.remotes))
	for _, r := range c.remotes {
		if r.alive {
			names = append(names, r.name)
		}
	}
	return names
}

// pickOrder returns names in the order Pick ranks them for blob: the
// owner first, then the owner if it were gone, and so on.
func pickOrder(blob rafs.Digest, names []string) []string {
	rest := slices.Clone(names)
	out := make([]string, 0, len(rest))
	for len(rest) > 0 {
		w := scheduler.Pick(blob, rest)
		out = append(out, w)
		rest = slices.DeleteFunc(rest, func(n string) bool { return n == w })
	}
	return out
}
