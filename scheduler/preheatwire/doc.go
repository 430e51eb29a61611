// Package preheatwire encodes and decodes the preheat protocol
// (/damselfly/preheat/1.0.0, documented in scheduler/PROTOCOL.md): a
// scheduler asks a peer to fetch an image's chunks ahead of the jobs that
// will read them, and the peer reports its progress on the same stream
// until a final result.
//
// message.go holds the messages and limits; codec.go frames, encodes and
// decodes them. The decoder checks every length against its limit before
// allocating and never panics on input.
package preheatwire
