package scheduler

import "errors"

// Errors the daemon branches on. Methods wrap them with the operation and
// the peer or blob concerned; test with errors.Is.
var (
	// ErrUnknownPeer: the peer is not registered (never was, unregistered,
	// or expired after missing heartbeats). The daemon answers it with
	// "register again, then announce in full", which is also how peers
	// find out that a scheduler restarted.
	ErrUnknownPeer = errors.New("scheduler: unknown peer")
	// ErrBanned: the peer is banned and may not announce holdings.
	ErrBanned = errors.New("scheduler: peer is banned")
	// ErrInvalid: the request broke a rule or a limit of Config (chunk
	// count, chunk ordinal, empty peer ID, a peer reporting itself).
	ErrInvalid = errors.New("scheduler: invalid request")
	// ErrLimit: accepting the announcement would take the peer over
	// Config.MaxHoldingBytesPerPeer, or all peers together over
	// Config.MaxHoldingBytes.
	ErrLimit = errors.New("scheduler: holdings limit reached")
	// ErrTooManyPeers: a registration would start a session beyond
	// Config.MaxPeers. The peer may try again later; members are not
	// affected.
	ErrTooManyPeers = errors.New("scheduler: too many peers")
	// ErrNoAssignment: a report about a peer the scheduler did not assign
	// to the reporter for that blob within Config.LeaseTimeout, or whose
	// assignment was already reported. Reports are only taken about
	// assignments, so a peer cannot talk down peers it never dealt with.
	ErrNoAssignment = errors.New("scheduler: no such assignment")
	// ErrRateLimited: the reporter used up its bad-bytes accusations
	// (Config.AccusationBurst, refilled every Config.AccusationRefill).
	ErrRateLimited = errors.New("scheduler: too many accusations")
)
