package main

import (
	"errors"
	"fmt"
	"time"

	"damselfly/peer/daemon"
)

// Config says what one invocation measures: one scenario (a cluster
// shape, with or without P2P), run Runs times from fresh nodes.
type Config struct {
	// Nodes is how many peer daemons pull the image at once.
	Nodes int
	// ImageMiB is the image's content in MiB (random, so its blobs are
	// as big as its content).
	ImageMiB int
	// NodeMbit is each node's link rate in Mbit/s, each direction: the
	// download of what reaches the node (origin and peers) and the upload
	// it serves to peers. 0 means unshaped.
	NodeMbit float64
	// OriginMbit is the origin registry's link rate in Mbit/s; 0 means
	// the same as NodeMbit.
	OriginMbit float64
	// RTT is the round-trip time added to every shaped link.
	RTT time.Duration
	// P2P gives the nodes a scheduler, so that they fetch from each
	// other; without it every node reads from the origin alone.
	P2P bool
	// Runs is how many times the scenario is measured, each time with
	// new nodes, caches and scheduler.
	Runs int
	// Readers is how many requests each node keeps in flight to its batch
	// endpoint, as a mount daemon's readers would.
	Readers int
	// BatchChunks is how many chunks one request asks for.
	BatchChunks int
	// ReaderSocket sends the readers' requests to their node's proxy over
	// its unix socket, as a mount daemon's go with proxy.url unix:///...;
	// by default they go over loopback TCP, as with configs/mount.yaml.
	ReaderSocket bool
	// CacheDirect has the nodes' caches read and write with direct I/O
	// (cache.direct_io true) instead of through the page cache.
	CacheDirect bool
	// CacheHotMiB gives each node's cache that much memory for the chunks
	// it cached most recently (cache.hot_bytes), used with CacheDirect
	// only; 0 keeps none. By default the peer daemon's default.
	CacheHotMiB int
	// Spread starts node i's reading i/Nodes of the way into the image
	// (wrapping around), as whole-image prefetches free to choose their
	// order would; by default every node reads in the same order, as
	// containers starting the same program do.
	Spread bool
	// MaxChildren and StarveAfter, when not zero, replace the scheduler's
	// tree_max_children and tree_starve_after.
	MaxChildren int
	StarveAfter time.Duration
	// HedgeDelay, when not zero, replaces the peers' hedge_delay;
	// negative turns hedging off.
	HedgeDelay time.Duration
	// RunTimeout bounds one run: setting up, pulling, tearing down.
	RunTimeout time.Duration
	// Out is the directory distribution.json and distribution.md are
	// kept in; a scenario measured again replaces its earlier result.
	Out string
	// Work is where images, caches and state go; empty means a new
	// temporary directory, removed at the end.
	Work string
	// Verbose passes the daemons' warnings and errors to stderr.
	Verbose bool
}

// Default is the issue 4 scenario: 8 nodes, 64 MiB, 200 Mbit/s links.
func Default() Config {
	return Config{
		Nodes:       8,
		ImageMiB:    64,
		NodeMbit:    200,
		RTT:         time.Millisecond,
		P2P:         true,
		Runs:        3,
		Readers:     4,
		BatchChunks: 4,
		CacheHotMiB: daemon.DefaultHotBytes >> 20,
		RunTimeout:  10 * time.Minute,
		Out:         "integration/bench/out",
	}
}

// Validate reports every problem with c at once.
func (c Config) Validate() error {
	var errs []error
	if c.Nodes < 1 || c.Nodes > 256 {
		errs = append(errs, fmt.Errorf("nodes: %d, want 1..256", c.Nodes))
	}
	if c.ImageMiB < 1 || c.ImageMiB > 16<<10 {
		errs = append(errs, fmt.Errorf("mb: %d, want 1..16384", c.ImageMiB))
	}
	if c.NodeMbit < 0 || c.OriginMbit < 0 {
		errs = append(errs, errors.New("mbit, origin-mbit: negative"))
	}
	if c.RTT < 0 {
		errs = append(errs, errors.New("rtt: negative"))
	}
	if c.Runs < 1 {
		errs = append(errs, fmt.Errorf("runs: %d, want at least 1", c.Runs))
	}
	if c.Readers < 1 || c.Readers > 64 {
		errs = append(errs, fmt.Errorf("readers: %d, want 1..64", c.Readers))
	}
	if c.BatchChunks < 1 || c.BatchChunks > 64 {
		errs = append(errs, fmt.Errorf("batch-chunks: %d, want 1..64", c.BatchChunks))
	}
	if c.RunTimeout <= 0 {
		errs = append(errs, errors.New("run-timeout: want positive"))
	}
	if c.Out == "" {
		errs = append(errs, errors.New("out: empty"))
	}
	return errors.Join(errs...)
}

// originMbit is the origin's link rate with the default applied.
func (c Config) originMbit() float64 {
	if c.OriginMbit == 0 {
		return c.NodeMbit
	}
	return c.OriginMbit
}

// bytesPerSec converts a link rate in Mbit/s; 0 stays 0 (unshaped).
func bytesPerSec(mbit float64) float64 { return mbit * 1e6 / 8 }
