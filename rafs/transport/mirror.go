package transport

import (
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"damselfly/rafs/chunkapi"
)

// mirrorTransport sends a registry client's reads (GET and HEAD of
// /v2/, manifests and blobs) to the node's peer, its registry mirror,
// naming the registry with ?ns= as containerd does, so that they are
// served from the node, its peers, or the origin through the peer, and
// keep working while the origin cannot be reached. When the peer itself
// cannot be reached (not running, no socket), the request goes to the
// registry directly, as the mount's backend falls back for chunks.
// Everything else (token requests, writes) goes directly.
type mirrorTransport struct {
	direct http.RoundTripper
	via    http.RoundTripper // to the mirror
	base   *url.URL          // the mirror's base URL
	only   bool              // no direct fallback (Options.MirrorOnly)
}

// newMirrorTransport returns a transport that tries mirror (an http(s)://
// URL, or unix:///path of the peer's socket) before direct.
func newMirrorTransport(mirror string, direct http.RoundTripper) (*mirrorTransport, error) {
	var base *http.Transport
	if t, ok := direct.(*http.Transport); ok {
		base = t
	}
	u, via, err := chunkapi.Endpoint(mirror, base)
	if err != nil {
		return nil, fmt.Errorf("mirror: %w", err)
	}
	bu, err := url.Parse(u)
	if err != nil || (bu.Scheme != "http" && bu.Scheme != "https") || bu.Host == "" {
		return nil, fmt.Errorf("mirror %q: want http(s)://HOST[:PORT] or unix:///path/to/socket", mirror)
	}
	m := &mirrorTransport{direct: direct, base: bu, via: direct}
	if via != nil {
		m.via = via
	}
	return m, nil
}

// mirrored reports whether a request for path goes to the mirror.
func mirrored(method, path string) bool {
	if method != http.MethodGet && method != http.MethodHead {
		return false
	}
	if path == "/v2/" {
		return true
	}
	rest, ok := strings.CutPrefix(path, "/v2/")
	return ok && (strings.Contains(rest, "/manifests/") || strings.Contains(rest, "/blobs/"))
}

func (m *mirrorTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if !mirrored(req.Method, req.URL.Path) || req.Body != nil && req.Body != http.NoBody {
		return m.direct.RoundTrip(req)
	}
	u := *req.URL
	q := u.Query()
	q.Set("ns", req.URL.Host)
	u.Scheme, u.Host, u.RawQuery = m.base.Scheme, m.base.Host, q.Encode()
	u.Path = strings.TrimRight(m.base.Path, "/") + req.URL.Path
	u.RawPath = ""
	mreq := req.Clone(req.Context())
	mreq.URL, mreq.Host = &u, ""
	resp, err := m.via.RoundTrip(mreq)
	if err == nil || req.Context().Err() != nil || m.only {
		return resp, err
	}
	return m.direct.RoundTrip(req)
}
