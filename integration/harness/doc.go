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
//   - registry.go runs docker-registry on a free port of 127.0.0.1 or
//     of a Net host (StartRegistry) with optional access log and
//     deletes, and plays outages (Down, Up on the same port with the
//     same content) and htpasswd authentication (RequireAuth). WaitHTTP
//     is the readiness poll for any process that serves HTTP, and
//     WaitHTTPFrom the same from a Net host.
//   - net.go, host.go and netclean.go put deployments on a network: NewNet makes a
//     private L2 segment (a bridge in a hub namespace of its own) and
//     AddHost a network namespace on it with an address in the Net's
//     10.N.0.0/16 and its link capped by the kernel in each direction
//     (Link; tc tbf on the egress of each veth end; an optional delay
//     needs netem). A node's processes join a host with
//     ProcConfig.Netns (nsenter --net, which execs in place, so Pid is
//     the daemon's; the mount namespace stays the harness's, so FUSE
//     mounts are seen by the test), the origin with
//     RegistryConfig.Host, and the harness's own code dials or listens
//     in a host with Host.DialContext, Host.Listen and Host.HTTPClient.
//     The root namespace is not on the segment. Close deletes every
//     namespace, and so every veth and the bridge; a new Net first
//     sweeps the namespaces of Nets whose process died (each live Net
//     holds a flock on /run/damselfly-netns/ID.lock). Nets need root,
//     ip, tc and nsenter.
//   - containerd.go runs a containerd of its own (StartContainerd):
//     root, state, socket and config.toml under one directory, the
//     plugins the tests and benchmarks need (proxy snapshotters, CRI on
//     or off), a bounded wait until it answers on its socket, and
//     containerd's v2 client on that socket (Containerd.Client).
//   - mount.go waits for a mount daemon's FUSE mount to come up
//     (WaitMounted) and unmounts it, waiting for the daemon to exit as it
//     must when its mountpoint goes (Unmount).
//   - image.go puts generated images (rafs/sample, rafs/rafstest) into a
//     registry: an OCI layout and umoci's reference unpacking of it, the
//     plain image pushed as it is, the RAFS conversion by the binary.
//   - linkstat.go and procstat.go are what benchmarks measure: the
//     bytes a host's link carried (ReadLink, from `ip -s -j` in its
//     namespace) and a process's CPU-seconds (ReadProcCPU,
//     Proc.CPUSeconds, from /proc/PID/stat).
//   - report.go writes a report as NAME.json and NAME.md side by side,
//     and the markdown table cells the benchmark reports share.
//
// The in-process distribution benchmark (integration/bench/distribution)
// keeps its own in-process nodes and registry, for schedule studies;
// links are shaped by integration/bench/shaper's token-bucket proxy.
// Tests of real processes behind capped links use a Net instead: the
// kernel shapes every connection, whoever opens it.
package harness
