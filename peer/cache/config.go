package cache

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
)

// Watermark defaults, as fractions of Config.Capacity.
const (
	DefaultHighWatermark = 0.95
	DefaultLowWatermark  = 0.80
)

// Config configures a Cache. The zero value of every field but Dir means
// its default.
type Config struct {
	// Dir is the cache directory, created if missing. Every process that
	// shares the node's cache opens the same Dir.
	Dir string
	// Capacity is the number of bytes of entry files (headers and stored
	// chunk bytes) the cache may hold; 0 means unlimited.
	Capacity int64
	// HighWatermark is the fraction of Capacity above which eviction
	// starts; 0 means DefaultHighWatermark. It must be in (0, 1].
	HighWatermark float64
	// LowWatermark is the fraction of Capacity eviction brings the cache
	// down to; 0 means DefaultLowWatermark. It must be in (0, 1) and below
	// HighWatermark.
	LowWatermark float64
	// DirectIO reads and writes entry files with direct I/O (O_DIRECT),
	// past the kernel's page cache, where the file system supports it
	// (Open checks; elsewhere the cache stays buffered). A node cache
	// written this way does not fill memory with tens of gigabytes of
	// image data the mount's own page cache already holds where it is
	// hot, nor flood the disk with writeback later; reads of a chunk go
	// to the device each time. Processes sharing Dir may differ in this.
	DirectIO bool
	// HotBytes is a memory budget for the stored bytes of the entries
	// most recently put, or read with Get, which Get and ReadChunk serve
	// without the disk; 0 keeps none. It applies with direct I/O only
	// (DirectIO, where the file system takes it), sparing the device the
	// reads of the chunks a peer uploads to others just after fetching
	// them; through the page cache the kernel keeps those already, and a
	// second copy here measured as more CPU, not less. A limited cache
	// keeps at most Capacity bytes in memory, whatever HotBytes says: a
	// small cache does not get a large memory beside it. No chunk larger
	// than a quarter of the budget is kept.
	HotBytes int64
	// Group, a group name or numeric gid, lets that group read the cache:
	// directories are then 0750 and files 0640, owned by the group. Empty
	// (the default) keeps them 0700 and 0600, for the owner only. Give
	// it when mount daemons run as another user than the peer daemon
	// and are in this group; every process sharing Dir should give the
	// same, since each sets the modes of what it finds at a scan to its
	// own. A process that may read Dir but not write it (such a mount
	// daemon) opens the cache read-only: Put returns ErrReadOnly and it
	// never evicts.
	Group string
	// probeDirect replaces the check Open makes of direct I/O, in tests
	// acting out a file system without it.
	probeDirect func(dir string) bool
	// Logger receives corrupt-entry warnings and eviction summaries; nil
	// discards them.
	Logger *slog.Logger
}

// Default returns the default configuration for dir: unlimited capacity and
// the default watermarks.
func Default(dir string) Config {
	return Config{Dir: dir, HighWatermark: DefaultHighWatermark, LowWatermark: DefaultLowWatermark}
}

// withDefaults fills the zero fields.
func (c Config) withDefaults() Config {
	if c.HighWatermark == 0 {
		c.HighWatermark = DefaultHighWatermark
	}
	if c.LowWatermark == 0 {
		c.LowWatermark = DefaultLowWatermark
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return c
}

// Validate reports every problem with c at once, each naming its field.
// Zero watermarks are checked as their defaults.
func (c Config) Validate() error {
	d := c.withDefaults()
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("Dir: must be set"))
	}
	if c.Capacity < 0 {
		errs = append(errs, fmt.Errorf("Capacity: %d is negative (0 means unlimited)", c.Capacity))
	}
	if c.HotBytes < 0 {
		errs = append(errs, fmt.Errorf("HotBytes: %d is negative (0 keeps none)", c.HotBytes))
	}
	if _, err := resolveGroup(c.Group); err != nil {
		errs = append(errs, fmt.Errorf("Group: %q: %w", c.Group, err))
	}
	high, low := d.HighWatermark, d.LowWatermark
	if math.IsNaN(high) || high <= 0 || high > 1 {
		errs = append(errs, fmt.Errorf("HighWatermark: %v is outside (0, 1]", c.HighWatermark))
	}
	if math.IsNaN(low) || low <= 0 || low >= 1 {
		errs = append(errs, fmt.Errorf("LowWatermark: %v is outside (0, 1)", c.LowWatermark))
	} else if low >= high {
		errs = append(errs, fmt.Errorf("LowWatermark: %v is not below HighWatermark %v", low, high))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("cache config: %w", err)
	}
	return nil
}

// hotBudget is the memory Config.HotBytes grants: never more than the
// cache's capacity.
func hotBudget(c Config) int64 {
	if c.Capacity > 0 {
		return min(c.HotBytes, c.Capacity)
	}
	return c.HotBytes
}

// highBytes and lowBytes are the watermarks in bytes; both are 0 for an
// unlimited cache.
func (c Config) highBytes() int64 { return int64(float64(c.Capacity) * c.HighWatermark) }
func (c Config) lowBytes() int64  { return int64(float64(c.Capacity) * c.LowWatermark) }
