package exchange

import (
	"errors"
	"fmt"
	"time"
)

// Defaults of ServerConfig (DefaultServerConfig).
const (
	DefaultMaxStreamsPerPeer = 4
	DefaultMaxStreams        = 64
	DefaultStreamTimeout     = 30 * time.Second
)

// sliceSize is how many bytes a server writes per turn at the upload
// limiter, and the smallest bucket: big enough to keep system calls few,
// small enough that peers' turns interleave finely.
const sliceSize = 64 << 10

// unlimitedSlice is the write size without an upload limit: each such
// write must still complete within StreamTimeout.
const unlimitedSlice = 1 << 20

// ServerConfig configures a Server. Start from DefaultServerConfig: a
// zero field means zero, and Validate refuses it where that makes no
// sense. The mapstructure tags are the peer daemon's keys
// (advanced.exchange.*).
type ServerConfig struct {
	// MaxStreamsPerPeer caps the requests one remote peer may have in
	// progress; a stream beyond it is answered StatusBusy and closed.
	// At least 1 and at most MaxStreams.
	MaxStreamsPerPeer int `mapstructure:"max_streams_per_peer"`
	// MaxStreams caps the requests in progress from all peers together,
	// and so the server's buffer memory (about two chunks per stream).
	// At least 1.
	MaxStreams int `mapstructure:"max_streams"`
	// UploadBytesPerSec caps the stored bytes sent per second by all
	// streams together, shared in turn between the requesting peers.
	// 0 means unlimited.
	UploadBytesPerSec int64 `mapstructure:"upload_bytes_per_sec"`
	// StreamTimeout is how long a requester may take to send its request,
	// and how long any one write to it may stall (a peer that stops
	// reading). Positive.
	StreamTimeout time.Duration `mapstructure:"stream_timeout"`
	// NoVerify skips the server's check of each chunk's digest before it
	// is sent. The node cache checks a CRC on every read and the requester
	// verifies every chunk, so this only trades the server's CPU against
	// catching a corrupt cache entry here rather than at the requester
	// (which would then ban this peer).
	NoVerify bool `mapstructure:"no_verify"`
}

// DefaultServerConfig returns the default configuration: every field
// set, no upload limit, and each chunk's digest checked before it is
// sent.
func DefaultServerConfig() ServerConfig {
	return ServerConfig{
		MaxStreamsPerPeer: DefaultMaxStreamsPerPeer,
		MaxStreams:        DefaultMaxStreams,
		StreamTimeout:     DefaultStreamTimeout,
	}
}

// burst is the upload bucket size: a tenth of a second of the rate, and at
// least one slice.
func (c ServerConfig) burst() int {
	return int(max(c.UploadBytesPerSec/10, sliceSize))
}

// Validate reports every problem with c at once, each naming its field.
func (c ServerConfig) Validate() error {
	var errs []error
	if c.MaxStreamsPerPeer < 1 {
		errs = append(errs, fmt.Errorf("max_streams_per_peer: %d is not positive", c.MaxStreamsPerPeer))
	}
	if c.MaxStreams < 1 {
		errs = append(errs, fmt.Errorf("max_streams: %d is not positive", c.MaxStreams))
	} else if c.MaxStreamsPerPeer > c.MaxStreams {
		errs = append(errs, fmt.Errorf("max_streams_per_peer: %d is above max_streams %d", c.MaxStreamsPerPeer, c.MaxStreams))
	}
	if c.UploadBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("upload_bytes_per_sec: %d is negative (0 means unlimited)", c.UploadBytesPerSec))
	}
	if c.StreamTimeout <= 0 {
		errs = append(errs, fmt.Errorf("stream_timeout: %v is not positive", c.StreamTimeout))
	}
	return errors.Join(errs...)
}
