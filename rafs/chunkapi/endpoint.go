package chunkapi

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
)

// SchemeUnix names a proxy reached over its unix socket (Config.UnixSocket)
// rather than TCP: unix:///run/damselfly/peer.sock. The socket's file mode
// decides who may use the node's peer, where any local process can reach
// its TCP port. Per byte, one stream costs the kernel about half the CPU
// of loopback TCP; 16 nodes reading at 200 Mbit/s each showed no
// difference (integration/bench/RESULTS.md).
const SchemeUnix = "unix"

// unixHost is the host of the HTTP requests sent over a unix socket; the
// server does not look at it.
const unixHost = "damselfly-peer"

// SocketPath returns the socket of a unix:// proxy URL, and whether u is
// one. A unix URL with a host, query or fragment is an error; so is one
// without an absolute path.
func SocketPath(u string) (string, bool, error) {
	if !strings.HasPrefix(u, SchemeUnix+":") {
		return "", false, nil
	}
	pu, err := url.Parse(u)
	if err != nil {
		return "", true, fmt.Errorf("%q is not a URL", u)
	}
	if pu.Host != "" || pu.RawQuery != "" || pu.Fragment != "" || !strings.HasPrefix(pu.Path, "/") || pu.Opaque != "" {
		return "", true, fmt.Errorf("%q: want unix:///absolute/path/to/socket", u)
	}
	return pu.Path, true, nil
}

// Endpoint returns the base URL to send requests to and the transport that
// reaches the proxy at u: for http(s) URLs, u itself and base; for a unix
// URL, a fixed http base and a transport with base's settings (nil: the
// defaults) that connects every request to the socket.
func Endpoint(u string, base *http.Transport) (string, *http.Transport, error) {
	path, ok, err := SocketPath(u)
	if err != nil || !ok {
		return strings.TrimRight(u, "/"), base, err
	}
	var t *http.Transport
	if base != nil {
		t = base.Clone()
	} else {
		t = http.DefaultTransport.(*http.Transport).Clone()
	}
	t.Proxy = nil
	var d net.Dialer
	t.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
		return d.DialContext(ctx, "unix", path)
	}
	t.DialTLSContext = nil
	return "http://" + unixHost, t, nil
}
