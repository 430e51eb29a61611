package wire

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/protocol"

	"damselfly/rafs"
	"damselfly/scheduler"
)

// ProtocolID names version 1 of the scheduler protocol. An incompatible
// change gets a new ID, negotiated by libp2p's multistream-select.
const ProtocolID protocol.ID = "/damselfly/scheduler/1.0.0"

// SessionProtocolID names the same messages carried as a session: a
// stream on which the peer sends any number of requests, one at a time,
// each answered before the next is sent, instead of a stream per
// request. A peer offers it first and ProtocolID after it; a scheduler
// that predates it picks ProtocolID.
const SessionProtocolID protocol.ID = "/damselfly/scheduler/session/1.0.0"

// Limits, checked before anything is allocated.
const (
	// MaxFrame bounds a frame's length field: message type plus body.
	MaxFrame = 1 << 20
	// MaxOrdinals bounds the chunk ordinals of one message, summed over
	// all its lists.
	MaxOrdinals = 1 << 16
	// MaxBitsetWords bounds an AnnounceFull bitset: 2^20 chunks.
	MaxBitsetWords = 1 << 14
	// MaxAddrs, MaxLabels and MaxStringLen bound a registration, as the
	// scheduler core does; they bound a parent's addresses too.
	MaxAddrs     = scheduler.MaxAddrs
	MaxLabels    = scheduler.MaxLabels
	MaxStringLen = scheduler.MaxStringLen
	// MaxParents bounds the parents of an answer.
	MaxParents = 64
	// MaxWaits bounds the wait groups of an answer.
	MaxWaits = 1024
	// MaxMessageLen bounds an error response's text.
	MaxMessageLen = 1024
)

// Type is a message's type code, the byte after the length.
type Type uint8

// Request types (peer to scheduler) and response types (scheduler to peer).
const (
	TypeRegister     Type = 0x01
	TypeHeartbeat    Type = 0x02
	TypeAnnounce     Type = 0x03
	TypeAnnounceFull Type = 0x04
	TypeDrop         Type = 0x05
	TypeAbandon      Type = 0x06
	TypeRoute        Type = 0x07
	TypeReport       Type = 0x08
	TypeUnregister   Type = 0x09
	TypeRouteWait    Type = 0x0a

	TypeOK     Type = 0x80
	TypeAnswer Type = 0x81
	TypeError  Type = 0x82
)

func (t Type) String() string {
	switch t {
	case TypeRegister:
		return "register"
	case TypeHeartbeat:
		return "heartbeat"
	case TypeAnnounce:
		return "announce"
	case TypeAnnounceFull:
		return "announce_full"
	case TypeDrop:
		return "drop"
	case TypeAbandon:
		return "abandon"
	case TypeRoute:
		return "route"
	case TypeReport:
		return "report"
	case TypeUnregister:
		return "unregister"
	case TypeRouteWait:
		return "route_wait"
	case TypeOK:
		return "ok"
	case TypeAnswer:
		return "answer"
	case TypeError:
		return "error"
	}
	return fmt.Sprintf("type(%#x)", uint8(t))
}

// ErrMalformed is wrapped by every decoding error: the frame breaks the
// protocol or one of its limits.
var ErrMalformed = errors.New("scheduler wire: malformed frame")

// Message is one frame's content. The concrete types are the structs
// below; a Message is encoded by WriteFrame and returned by ReadFrame.
type Message interface {
	Type() Type
	appendBody(b []byte) []byte
}

// Register starts (or restarts) the sending peer's session.
type Register struct {
	Addrs          []string
	Labels         map[string]string
	UploadCapacity int64
}

// Heartbeat renews the sending peer's session and reports its load.
type Heartbeat struct {
	Load scheduler.Load
}

// Announce says the sending peer now holds Chunks of Blob.
type Announce struct {
	Blob   rafs.Digest
	Chunks []uint32
}

// AnnounceFull replaces all the sending peer holds of Blob with Held.
type AnnounceFull struct {
	Blob rafs.Digest
	Held scheduler.Bitset
}

// Drop says the sending peer no longer holds Chunks of Blob.
type Drop struct {
	Blob   rafs.Digest
	Chunks []uint32
}

// Abandon gives up the sending peer's origin turns for Chunks of Blob.
type Abandon struct {
	Blob   rafs.Digest
	Chunks []uint32
}

// Route asks where the sending peer should get Chunks of Blob. Bytes is
// their stored size in all, 0 when the sender does not say: it lets the
// scheduler bound a peer's origin turns in bytes as well as in chunks.
// It travels only when not 0, as an optional last field, so that a Route
// without it is what an older peer sends.
type Route struct {
	Blob   rafs.Digest
	Chunks []uint32
	Bytes  uint64
}

// RouteWait is a Route that the scheduler may hold for up to MaxWait
// when its whole answer would be to wait: until one of Chunks is
// announced or its origin turn is given up, then it answers afresh. So
// a waiting peer learns of a new holder as soon as there is one, instead
// of at its next poll.
type RouteWait struct {
	Blob    rafs.Digest
	Chunks  []uint32
	MaxWait time.Duration
	Bytes   uint64 // as Route's
}

// Report is the sending peer's outcome of an assignment to About.
type Report struct {
	About   string
	Outcome scheduler.Outcome
}

// Unregister ends the sending peer's session (a clean shutdown).
type Unregister struct{}

// OK accepts a request. Banned is set when a Report got its subject
// banned.
type OK struct {
	Banned bool
}

// Answer answers a Route. Fetchers of its waits do not travel.
type Answer struct {
	Answer scheduler.Answer
}

// Code classifies an error response.
type Code uint8

// Error codes.
const (
	CodeUnknownPeer  Code = 1 // not registered: register, then announce in full
	CodeRateLimited  Code = 2 // too many streams or accusations; try later
	CodeBadRequest   Code = 3 // the request broke the protocol or a rule
	CodeInternal     Code = 4 // the scheduler failed
	CodeBanned       Code = 5 // the sending peer is banned
	CodeLimit        Code = 6 // the peer's holdings budget is used up
	CodeTooManyPeers Code = 7 // the scheduler has all the members it takes; register later
)

func (c Code) String() string {
	switch c {
	case CodeUnknownPeer:
		return "unknown peer"
	case CodeRateLimited:
		return "rate limited"
	case CodeBadRequest:
		return "bad request"
	case CodeInternal:
		return "internal error"
	case CodeBanned:
		return "banned"
	case CodeLimit:
		return "holdings limit"
	case CodeTooManyPeers:
		return "too many peers"
	}
	return fmt.Sprintf("code(%d)", uint8(c))
}

// Error refuses a request. It is also an error value, so a client can
// return it; compare codes with errors.As.
type Error struct {
	Code    Code
	Message string
}

func (e *Error) Error() string {
	if e.Message == "" {
		return "scheduler: " + e.Code.String()
	}
	return "scheduler: " + e.Code.String() + ": " + e.Message
}

func (*Register) Type() Type     { return TypeRegister }
func (*Heartbeat) Type() Type    { return TypeHeartbeat }
func (*Announce) Type() Type     { return TypeAnnounce }
func (*AnnounceFull) Type() Type { return TypeAnnounceFull }
func (*Drop) Type() Type         { return TypeDrop }
func (*Abandon) Type() Type      { return TypeAbandon }
func (*Route) Type() Type        { return TypeRoute }
func (*RouteWait) Type() Type    { return TypeRouteWait }
func (*Report) Type() Type       { return TypeReport }
func (*Unregister) Type() Type   { return TypeUnregister }
func (*OK) Type() Type           { return TypeOK }
func (*Answer) Type() Type       { return TypeAnswer }
func (*Error) Type() Type        { return TypeError }
