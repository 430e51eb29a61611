package server

import (
	"net/netip"

	ma "github.com/multiformats/go-multiaddr"
)

// sourceOf names the machine a connection comes from, for ban quorums
// (scheduler.PeerInfo.Source): the IP address of the connection's far
// end, without the port. It is the one thing about a peer the scheduler
// does not take on the peer's word: the kernel saw it (a TCP peer had to
// complete the handshake from that address, and then prove its key on
// that connection), where a peer ID is a key anyone can make by the
// thousand and a host label is whatever the peer wrote. An IPv6 address
// counts as its /64, since one machine is commonly given a whole /64 and
// may use any address in it. Peers behind one NAT address count as one
// machine, and so do peers relayed through one relay (the address is the
// relay's): quorums among them are harder to reach, never easier. An
// address with no IP component gives "", which the core counts as one
// machine shared by every such peer.
func sourceOf(a ma.Multiaddr) string {
	for _, c := range a {
		switch c.Protocol().Code {
		case ma.P_IP4, ma.P_IP6:
			ip, ok := netip.AddrFromSlice(c.RawValue())
			if !ok {
				return ""
			}
			ip = ip.Unmap()
			if ip.Is4() {
				return ip.String()
			}
			p, err := ip.Prefix(64)
			if err != nil {
				return ""
			}
			return p.String()
		}
	}
	return ""
}
