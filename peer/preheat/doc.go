// Package preheat is the peer's preheat worker: asked by a scheduler (the
// stream, its framing and its progress reports are scheduler/client's
// PreheatServer, which calls Worker.Preheat), it opens a docker://
// image through its registry, lists its chunks (all, or those of the
// files its prefetch table names) and reads them through the node, so
// that they are in the node cache, held and announced before the jobs
// that will read them start.
//
// The parts:
//
//   - worker.go: Worker, New and Preheat, which reads the chunks through
//     the node in batches, a few at once; chunks the node cache holds
//     already are adopted (held and announced as part of their blob, as
//     the verified bootstrap says) without being read.
//   - chunks.go: which chunks of a bootstrap to fetch, grouped by blob.
//   - open.go: opening the image (docker:// only: a scheduler names
//     images, not files on this node), within MaxBootstrapSize.
//   - keychain.go: registry credentials from one docker config file.
//   - config.go: Config, Default and Validate.
//
// It imports nothing of the scheduler: the node is the consumer-owned
// Node interface, and Worker satisfies scheduler/client.Preheater by its
// method's shape alone.
package preheat
