package preheat

import (
	"errors"
	"fmt"
	"time"

	"damselfly/rafs"
)

// Config configures a Worker. Default gives every tuning field a working
// value; Validate checks them. (Who may ask for a preheat, how many run
// at once and how often progress is sent are the stream's:
// scheduler/client.PreheatConfig.)
type Config struct {
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
	// OpenTimeout bounds reading the image's manifest and bootstrap.
	OpenTimeout time.Duration
	// MaxBootstrapSize is the largest bootstrap an image's bootstrap
	// layer may inflate to, in bytes; a layer whose superblock declares
	// more is refused before it is inflated.
	MaxBootstrapSize int64
}

// Default returns the default Config.
func Default() Config {
	return Config{
		BatchChunks:      64,
		Parallel:         4,
		OpenTimeout:      time.Minute,
		MaxBootstrapSize: rafs.DefaultMaxBootstrapSize,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if c.BatchChunks < 1 || c.BatchChunks > 4096 {
		errs = append(errs, fmt.Errorf("batch_chunks: %d is not in [1, 4096]", c.BatchChunks))
	}
	if c.Parallel < 1 || c.Parallel > 64 {
		errs = append(errs, fmt.Errorf("parallel: %d is not in [1, 64]", c.Parallel))
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
