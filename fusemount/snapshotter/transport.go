package snapshotter

import "damselfly/rafs/transport"

// defaultTransport is how the snapshotter reaches registries by default:
// the node's docker config for credentials (the keychain `damselfly
// mount docker://` uses), plain HTTP only to loopback registries.
func defaultTransport() transport.Options {
	return transport.Options{UserAgent: "damselfly-snapshotter"}
}
