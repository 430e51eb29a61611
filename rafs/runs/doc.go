// Package runs is the one range planner: it turns chunks adjacent in a
// blob into byte ranges, each fetched with one request.
//
// A Run is chunks of one blob whose stored bytes follow each other with
// no gap, and the byte range [Off, End) they cover. Three planners make
// runs, one per situation:
//
//   - Merge groups a batch of chunks wanted at once (the peer's misses
//     for the origin, peer/fetch origin.go): sorted by offset, adjacent
//     chunks merged into runs up to a byte budget.
//   - Extend grows a run forward from one wanted chunk (the mount's miss,
//     fusemount fetcher.go): the chunks stored after it, as the
//     bootstrap's chunk table lists them, while they are adjacent, within
//     the budget and not refused by the caller's stop predicate (already
//     at hand, being fetched).
//   - Check validates a run someone else planned (a request into the
//     mount's backend chain, fusemount/backend): one blob, no gap or
//     overlap, within the blob's size and a budget, with no offset
//     arithmetic wrapping past 2^64, so that its length may be allocated
//     and each chunk's slice taken without a panic.
//
// Of and Run.Stored are the byte arithmetic every reader of a run
// repeats: the range of a run and the slice of one chunk in its bytes.
//
// Offsets, sizes and budgets are uint64 and every sum is checked, because
// chunk descriptions come from hostile bootstraps and peer requests. The
// package is pure: no I/O, clock or goroutines.
package runs
