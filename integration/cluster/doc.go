// Package cluster is damselfly's end-to-end suite: real processes built
// from the tree (scheduler, one peer daemon per node, mount daemons), a
// real docker-registry as origin, FUSE mounts, each node with its own
// state directory and node cache. The tests start and stop everything
// themselves, talk only to loopback addresses, and check every byte read
// against the source image and count bytes by source (node cache, peers,
// registry).
//
// The harness is in the _test files: procs_test.go runs and stops
// processes, registry_test.go a restartable registry, gate_test.go each
// node's road to the registry (it counts the bytes and injects faults:
// delays, closed connections, 5xx, wrong bytes, short bodies, and
// records each blob GET's range and time),
// cluster_test.go a cluster of nodes; each scenario has its own file.
package cluster
