// Package cluster is damselfly's end-to-end suite: real processes built
// from the tree (scheduler, one peer daemon per node, mount daemons), a
// real docker-registry as origin, FUSE mounts, each node with its own
// state directory and node cache. The tests start and stop everything
// themselves, talk only to loopback addresses, and check every byte read
// against the source image and count bytes by source (node cache, peers,
// registry).
//
// The processes, the registry and the image push are
// integration/harness, shared with the soak and the benchmarks; the
// _test files wrap it: procs_test.go turns its errors into test
// failures and stops every process in t.Cleanup, registry_test.go does
// the same for the restartable registry, gate_test.go is each node's
// road to the registry (it counts the bytes and injects faults: delays,
// closed connections, 5xx, wrong bytes, short bodies, and records each
// blob GET's range and time), cluster_test.go a cluster of nodes,
// containerd_test.go containerd daemons (each with its own root, state
// and socket) whose pulls use configs/containerd/hosts.toml as shipped,
// and helloimage_test.go the small runnable image they pull; each
// scenario has its own file.
package cluster
