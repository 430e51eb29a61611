package exchange

import (
	"errors"
	"fmt"
	"time"
)

// Defaults for the zero fields of ServerConfig.
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

// ServerConfig configures a Server. The zero value of each field means its
// default.
type ServerConfig struct {
	// MaxStreamsPerPeer caps the requests one remote peer may have in
	// progress; a stream beyond it is answered StatusBusy and closed.
	// 0 means DefaultMaxStreamsPerPeer.
	MaxStreamsPerPeer int
	// MaxStreams caps the requests in progress from all peers together,
	// and so the server's buffer memory (about two chunks per stream).
	// 0 means DefaultMaxStreams.
	MaxStreams int
	// UploadBytesPerSec caps the stored bytes sent per second by all
	// streams together, shared in turn between the requesting peers.
	// 0 means unlimited.
	UploadBytesPerSec int64
	// StreamTimeout is how long a requester may take to send its request,
	// and how long any one write to it may stall (a peer that stops
	// reading). 0 means DefaultStreamTimeout.
	StreamTimeout time.Duration
	// NoVerify skips the server's check of each chunk's digest before it
	// is sent. The node cache checks a CRC on every read and the requester
	// verifies every chunk, so this only trades the server's CPU against
	// catching a corrupt cache entry here rather than at the requester
	// (which would then ban this peer).
	NoVerify bool
}

func (c ServerConfig) withDefaults() ServerConfig {
	if c.MaxStreamsPerPeer == 0 {
		c.MaxStreamsPerPeer = DefaultMaxStreamsPerPeer
	}
	if c.MaxStreams == 0 {
		c.MaxStreams = DefaultMaxStreams
	}
	if c.StreamTimeout == 0 {
		c.StreamTimeout = DefaultStreamTimeout
	}
	return c
}

// burst is the upload bucket size: a tenth of a second of the rate, and at
// least one slice.
func (c ServerConfig) burst() int {
	return int(max(c.UploadBytesPerSec/10, sliceSize))
}

// Validate reports every problem with c at once, each naming its field.
func (c ServerConfig) Validate() error {
	d := c.withDefaults()
	var errs []error
	if c.MaxStreamsPerPeer < 0 {
		errs = append(errs, fmt.Errorf("MaxStreamsPerPeer: %d is negative", c.MaxStreamsPerPeer))
	}
	if c.MaxStreams < 0 {
		errs = append(errs, fmt.Errorf("MaxStreams: %d is negative", c.MaxStreams))
	} else if c.MaxStreamsPerPeer >= 0 && d.MaxStreamsPerPeer > d.MaxStreams {
		errs = append(errs, fmt.Errorf("MaxStreamsPerPeer: %d is above MaxStreams %d", d.MaxStreamsPerPeer, d.MaxStreams))
	}
	if c.UploadBytesPerSec < 0 {
		errs = append(errs, fmt.Errorf("UploadBytesPerSec: %d is negative (0 means unlimited)", c.UploadBytesPerSec))
	}
	if c.StreamTimeout < 0 {
		errs = append(errs, fmt.Errorf("StreamTimeout: %v is negative", c.StreamTimeout))
	}
	return errors.Join(errs...)
}
