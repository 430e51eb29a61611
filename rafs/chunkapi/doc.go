// Package chunkapi is the contract between a reader of RAFS chunks (the
// mount daemon, the demo) and the peer that serves them over HTTP: the
// batch endpoint's request and response framing, its errors, and the
// client. The server side lives in proxy; this package imports neither
// side, so both can depend on it (see proxy/PROTOCOL.md for the bytes).
package chunkapi
