package cache

import (
	"errors"
	"fmt"
	"log/slog"
	"math"
)

// Watermark defaults (Default), as fractions of Config.Capacity.
const (
	DefaultHighWatermark = 0.95
	DefaultLowWatermark  = 0.80
)

// Config configures a Cache. Start from Default: a zero field means zero,
// and Validate refuses it where that makes no sense. The mapstructure tags
// are the daemons' keys (cache.*); fields tagged config:"advanced" are
// tunables whose defaults need no touching (advanced.cache.*).
type Config struct {
	// Dir is the cache directory, created if missing. Every process that
	// shares the node's cache opens the same Dir.
	Dir string `mapstructure:"dir"`
	// Capacity is the number of bytes of entry files (headers and stored
	// chunk bytes) the cache may hold; 0 means unlimited.
	Capacity int64 `mapstructure:"capacity"`
	// HighWatermark is the fraction of Capacity above which eviction
	// starts, in (0, 1]; DefaultHighWatermark by default. Unused (and
	// may be 0) when Capacity is 0.
	HighWatermark float64 `mapstructure:"high_watermark" config:"advanced"`
	// LowWatermark is the fraction of Capacity eviction brings the cache
	// down to, in (0, 1) and below HighWatermark; DefaultLowWatermark by
	// default. Unused (and may be 0) when Capacity is 0.
	LowWatermark float64 `mapstructure:"low_watermark" config:"advanced"`
	// DirectIO reads and writes entry files with direct I/O (O_DIRECT),
	// past the kernel's page cache, where the file system supports it
	// (Open checks; elsewhere the cache stays buffered). A node cache
	// written this way does not fill memory with tens of gigabytes of
	// image data the mount's own page cache already holds where it is
	// hot, nor flood the disk with writeback later; reads of a chunk go
	// to the device each time. Processes sharing Dir may differ in this.
	DirectIO bool `mapstructure:"direct_io"`
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
	HotBytes int64 `mapstructure:"hot_bytes" config:"advanced"`
	// Group, a group name or numeric gid, lets that group read the cache:
	// directories are then 0750 and files 0640, owned by the group. Empty
	// (the default) keeps them 0700 and 0600, for the owner only. Give
	// it when mount daemons run as another user than the peer daemon
	// and are in this group; every process sharing Dir should give the
	// same, since each sets the modes of what it finds at a scan to its
	// own. A process that may read Dir but not write it (such a mount
	// daemon) opens the cache read-only: Put returns ErrReadOnly and it
	// never evicts.
	Group string `mapstructure:"group"`
	// probeDirect replaces the check Open makes of direct I/O, in tests
	// acting out a file system without it.
	probeDirect func(dir string) bool
	// entryFiles, set by tests only, makes Put write entry files, as with
	// direct I/O, instead of packs: for the tests of what entry files a
	// process of an earlier release, or one with direct I/O, leaves.
	entryFiles bool
	// Logger receives corrupt-entry warnings and eviction summaries; nil
	// discards them.
	Logger *slog.Logger `mapstructure:"-"`
}

// Default returns the default configuration for dir: unlimited capacity,
// the default watermarks, buffered I/O, no hot memory, the owner's modes.
func Default(dir string) Config {
	return Config{Dir: dir, HighWatermark: DefaultHighWatermark, LowWatermark: DefaultLowWatermark}
}

// Validate reports every problem with c at once, each naming its key.
func (c Config) Validate() error {
	var errs []error
	if c.Dir == "" {
		errs = append(errs, errors.New("dir: must be set"))
	}
	if c.Capacity < 0 {
		errs = append(errs, fmt.Errorf("capacity: %d is negative (0 means unlimited)", c.Capacity))
	}
	if c.HotBytes < 0 {
		errs = append(errs, fmt.Errorf("hot_bytes: %d is negative (0 keeps none)", c.HotBytes))
	}
	if _, err := resolveGroup(c.Group); err != nil {
		errs = append(errs, fmt.Errorf("group: %q: %w", c.Group, err))
	}
	high, low := c.HighWatermark, c.LowWatermark
	if c.Capacity == 0 && high == 0 && low == 0 {
		return errors.Join(errs...) // unlimited: no eviction
	}
	if math.IsNaN(high) || high <= 0 || high > 1 {
		errs = append(errs, fmt.Errorf("high_watermark: %v is outside (0, 1]", c.HighWatermark))
	}
	if math.IsNaN(low) || low <= 0 || low >= 1 {
		errs = append(errs, fmt.Errorf("low_watermark: %v is outside (0, 1)", c.LowWatermark))
	} else if low >= high {
		errs = append(errs, fmt.Errorf("low_watermark: %v is not below high_watermark %v", low, high))
	}
	return errors.Join(errs...)
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
