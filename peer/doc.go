// Package peer will hold the node daemon: the libp2p host, chunk exchange
// with other peers, the node cache shared with fusemount, origin
// (back-to-source) fetching and the scheduler client. See DESIGN.md; it
// is built by the "peer and proxy" issue.
package peer
