package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// PreheatConfig configures a PreheatServer. DefaultPreheat gives every
// tuning field a working value; Validate checks them.
type PreheatConfig struct {
	// Schedulers are the multiaddrs (ending in /p2p/<peer ID>) of the
	// schedulers this peer is configured with: only they may ask it to
	// preheat. With none, every request is refused.
	Schedulers []string
	// MaxJobs bounds the preheats running at once; more are refused.
	MaxJobs int
	// ProgressInterval is how often a progress frame is sent; it is also
	// how soon a scheduler that went away is noticed at the latest.
	ProgressInterval time.Duration
}

// DefaultPreheat returns the default PreheatConfig, with no schedulers.
func DefaultPreheat() PreheatConfig {
	return PreheatConfig{MaxJobs: 4, ProgressInterval: 500 * time.Millisecond}
}

// Validate reports every problem with c at once, each naming its field.
func (c PreheatConfig) Validate() error {
	var errs []error
	if _, err := c.schedulerIDs(); err != nil {
		errs = append(errs, err)
	}
	if c.MaxJobs < 1 || c.MaxJobs > 256 {
		errs = append(errs, fmt.Errorf("max_jobs: %d is not in [1, 256]", c.MaxJobs))
	}
	if c.ProgressInterval <= 0 {
		errs = append(errs, fmt.Errorf("progress_interval: %v must be positive", c.ProgressInterval))
	}
	return errors.Join(errs...)
}

// schedulerIDs returns the peer IDs of c.Schedulers.
func (c PreheatConfig) schedulerIDs() (map[peer.ID]bool, error) {
	ids := make(map[peer.ID]bool, len(c.Schedulers))
	for i, s := range c.Schedulers {
		ai, err := peer.AddrInfoFromString(s)
		if err != nil {
			return nil, fmt.Errorf("schedulers[%d]: %q: want a multiaddr ending in /p2p/<peer ID>: %w", i, s, err)
		}
		ids[ai.ID] = true
	}
	return ids, nil
}
