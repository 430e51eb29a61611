package preheatwire

import (
	"errors"

	"github.com/libp2p/go-libp2p/core/protocol"
)

// ProtocolID names version 1 of the preheat protocol. An incompatible
// change gets a new ID.
const ProtocolID protocol.ID = "/damselfly/preheat/1.0.0"

// Limits of the protocol, checked before allocating.
const (
	// MaxFrame bounds a frame's length field: message type plus body.
	MaxFrame = 8 << 10
	// MaxImageLen bounds the image reference of a Request.
	MaxImageLen = 2048
	// MaxMessageLen bounds the message of a Result.
	MaxMessageLen = 1024
)

// ErrMalformed is wrapped by every error about a frame that breaks the
// protocol.
var ErrMalformed = errors.New("preheatwire: malformed frame")

// Type is a message's type byte.
type Type uint8

// Message types.
const (
	TypeRequest  Type = 0x01
	TypeProgress Type = 0x81
	TypeResult   Type = 0x82
)

func (t Type) String() string {
	switch t {
	case TypeRequest:
		return "request"
	case TypeProgress:
		return "progress"
	case TypeResult:
		return "result"
	}
	return "unknown"
}

// Message is one of *Request, *Progress and *Result.
type Message interface {
	Type() Type
}

// Request asks the peer to preheat Image, a docker://HOST/REPO[:TAG|@DIGEST]
// reference to a RAFS image: all of its chunks, or with PrefetchOnly those
// of the files in its prefetch table.
type Request struct {
	Image        string
	PrefetchOnly bool
}

// Counts is how far a preheat got: chunks and stored bytes done (in the
// node cache, fetched or already there) out of the total to do.
type Counts struct {
	ChunksDone, ChunksTotal uint64
	BytesDone, BytesTotal   uint64
}

// Progress is sent by the peer while it works.
type Progress struct {
	Counts
}

// Result is the peer's last message: OK when every chunk is in its cache,
// otherwise Message says why not.
type Result struct {
	Counts
	OK      bool
	Message string
}

// Type implements Message.
func (*Request) Type() Type { return TypeRequest }

// Type implements Message.
func (*Progress) Type() Type { return TypeProgress }

// Type implements Message.
func (*Result) Type() Type { return TypeResult }
