// Package harness is what damselfly's multi-process tests, soak and
// benchmarks share to run a deployment on one machine: the origin
// registry, the damselfly processes, the images in the registry and the
// report files. It returns errors rather than failing a test, so that
// the soak and bench commands use it as the tests do; each test suite
// wraps it in a few lines that turn errors into t.Fatal and stop what it
// started in t.Cleanup.
//
// The parts fit together like this:
//
//   - build.go builds the damselfly command from the tree: Binary once per
//     process (a test binary's TestMain), Build for any package and path.
//   - proc.go starts a process (Start) with its stdout and stderr in a log
//     file, waits for a readiness line on its stdout with a bounded
//     deadline (Proc.WaitLine), and stops it: SIGTERM, then SIGKILL after
//     a timeout, reported as ErrKilled. Every process is reaped by a
//     goroutine from the moment it starts.
//   - registry.go runs docker-registry on a free port of 127.0.0.1
//     (StartRegistry) with optional access log and deletes, and plays
//     outages (Down, Up on the same port with the same content) and
//     htpasswd authentication (RequireAuth). WaitHTTP is the readiness
//     poll for any process that serves HTTP.
//   - mount.go waits for a mount daemon's FUSE mount to come up
//     (WaitMounted) and unmounts it, waiting for the daemon to exit as it
//     must when its mountpoint goes (Unmount).
//   - image.go puts generated images (rafs/sample, rafs/rafstest) into a
//     registry: an OCI layout and umoci's reference unpacking of it, the
//     plain image pushed as it is, the RAFS conversion by the binary.
//   - report.go writes a report as NAME.json and NAME.md side by side,
//     and the markdown table cells the benchmark reports share.
//
// The in-process distribution benchmark (integration/bench/distribution)
// keeps its own in-process nodes and registry, for schedule studies;
// links are shaped by integration/bench/shaper's token-bucket proxy.
package harness
