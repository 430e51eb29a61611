// Package wire is the scheduler protocol: the messages peers and the
// scheduler daemon exchange over libp2p streams, their binary encoding and
// the framing around it. scheduler/PROTOCOL.md documents every frame.
//
// One stream carries one request: the peer writes one request frame, the
// scheduler answers with one response frame. Messages are plain structs
// that implement Message; WriteFrame encodes one, ReadFrame and Decode
// decode one, checking every count and length against the limits below
// before allocating, so a hostile frame costs at most MaxFrame bytes of
// buffer and never a panic.
//
// The parts:
//
//   - message.go: the message types, type codes and error codes.
//   - encode.go: the body encoders and WriteFrame.
//   - decode.go: the body decoders, Decode and ReadFrame.
package wire
