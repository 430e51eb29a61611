package peer

import (
	"errors"
	"fmt"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
)

// PreheatConfig configures a Preheater. DefaultPreheat gives every
// tuning field a working value; Validate checks them.
type PreheatConfig struct {
	// Schedulers are the multiaddrs (ending in /p2p/<peer ID>) of the
	// schedulers this peer is configured with: only they may ask it to
	// preheat. With none, every request is refused.
	Schedulers []string
	// PlainHTTP lists registry hosts spoken to over plain HTTP, as the
	// upstream client's plain_http (loopback hosts always are).
	PlainHTTP []string
	// DockerConfigFile holds the node's registry credentials (docker
	// config.json "auths"), used to read manifests and bootstraps. Empty:
	// anonymous.
	DockerConfigFile string
	// BatchChunks is how many chunks one read of the node asks for.
	BatchChunks int
	// Parallel is how many such reads one preheat has in flight.
	Parallel int
	// MaxJobs bounds the preheats running at once; more are refused.
	MaxJobs int
	// ProgressInterval is how often a progress frame is sent; it is also
	// how soon a scheduler that went away is noticed at the latest.
	ProgressInterval time.Duration
	// OpenTimeout bounds reading the image's manifest and bootstrap.
	OpenTimeout time.Duration
	// MaxBootstrapSize is the largest bootstrap an image's bootstrap
	// layer may inflate to, in bytes; a layer whose superblock declares
	// more is refused before it is inflated.
	MaxBootstrapSize int64
}

// DefaultPreheat returns the default PreheatConfig, with no schedulers.
func DefaultPreheat() PreheatConfig {
	return PreheatConfig{
		BatchChunks:      64,
		Parallel:         4,
		MaxJobs:          4,
		ProgressInterval: 500 * time.Millisecond,
		OpenTimeout:      time.Minute,
		MaxBootstrapSize: rafs.DefaultMaxBootstrapSize,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c PreheatConfig) Validate() error {
	var errs []error
	if _, err := c.schedulerIDs(); err != nil {
		errs = append(errs, err)
	}
	if c.BatchChunks < 1 || c.BatchChunks > 4096 {
		errs = append(errs, fmt.Errorf("batch_chunks: %d is not in [1, 4096]", c.BatchChunks))
	}
	if c.Parallel < 1 || c.Parallel > 64 {
		errs = append(errs, fmt.Errorf("parallel: %d is not in [1, 64]", c.Parallel))
	}
	if c.MaxJobs < 1 || c.MaxJobs > 256 {
		errs = append(errs, fmt.Errorf("max_jobs: %d is not in [1, 256]", c.MaxJobs))
	}
	if c.ProgressInterval <= 0 {
		errs = append(errs, fmt.Errorf("progress_interval: %v must be positive", c.ProgressInterval))
	}
	if c.OpenTimeout <= 0 {
		errs = append(errs, fmt.Errorf("open_timeout: %v must be positive", c.OpenTimeout))
	}
	if err := ValidMaxBootstrapSize(c.MaxBootstrapSize); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// ValidMaxBootstrapSize checks a max_bootstrap_bytes setting: 1 MiB to
// rafs.MaxBootstrapSize.
func ValidMaxBootstrapSize(n int64) error {
	if n < 1<<20 || n > rafs.MaxBootstrapSize {
		return fmt.Errorf("max_bootstrap_bytes: %d is not in [1 MiB, 4 GiB]", n)
	}
	return nil
}

// schedulerIDs returns the peer IDs of c.Schedulers.
func (c PreheatConfig) schedulerIDs() (map[lpeer.ID]bool, error) {
	ids := make(map[lpeer.ID]bool, len(c.Schedulers))
	for i, s := range c.Schedulers {
		ai, err := lpeer.AddrInfoFromString(s)
		if err != nil {
			return nil, fmt.Errorf("schedulers[%d]: %q: want a multiaddr ending in /p2p/<peer ID>: %w", i, s, err)
		}
		ids[ai.ID] = true
	}
	return ids, nil
}
