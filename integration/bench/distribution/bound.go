package main

import "fmt"

// Bound is the physical floor of a node's completion time: no schedule
// of transfers over the configured links can finish sooner.
type Bound struct {
	Seconds float64 `json:"seconds"` // 0 when no link is shaped
	// Binding names the term that sets the floor.
	Binding string `json:"binding"`
	Formula string `json:"formula"`
}

// floor computes the bound for a cluster of nodes that each need image
// bytes, with per-node links of node bytes/s each way, an origin link of
// origin bytes/s (0: unshaped) and chunks of chunk bytes.
//
// Every node has to receive the whole image over its own downlink
// (image/node). Without P2P the origin has to send it once per node
// (nodes*image/origin). With P2P it has to send it at least once
// (image/origin), and the last chunk it sends has to be relayed by at
// least one peer before the other nodes hold it (one more chunk/node). The
// cluster's total upload (origin plus every node's uplink) does not bind:
// nodes*image/(origin+nodes*node) is below image/node.
func floor(p2p bool, nodes int, image, chunk int64, node, origin float64) Bound {
	s := float64(image)
	var nodeT, originT float64
	if node > 0 {
		nodeT = s / node
	}
	copies := 1.0
	if !p2p {
		copies = float64(nodes)
	}
	if origin > 0 {
		originT = copies * s / origin
	}
	b := Bound{Seconds: nodeT, Binding: "node link", Formula: "image/node_rate"}
	if originT > nodeT {
		b = Bound{Seconds: originT, Binding: "origin link", Formula: "image/origin_rate"}
		if !p2p {
			b.Formula = fmt.Sprintf("%d x image/origin_rate", nodes)
		}
	}
	if p2p && nodes > 1 && node > 0 && b.Seconds > 0 {
		b.Seconds += float64(chunk) / node
		b.Formula += " + chunk/node_rate"
	}
	if b.Seconds == 0 {
		return Bound{Binding: "none (unshaped)"}
	}
	return b
}
