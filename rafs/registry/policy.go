package registry

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"
)

// ErrRefused is returned (wrapped) for a connection or redirect the
// origin policy forbids: plain http to a host that is neither loopback
// nor listed in PlainHTTP, or any address that is link-local or a cloud
// metadata service. It is permanent.
var ErrRefused = errors.New("refused by the origin policy")

// metadataIPs are cloud instance-metadata addresses outside the
// link-local ranges (which are refused whole): AWS's IPv6 endpoint and
// Alibaba Cloud's.
var metadataIPs = []net.IP{
	net.ParseIP("fd00:ec2::254"),
	net.ParseIP("100.100.100.200"),
}

// forbiddenIP reports whether no request of the peer's may go to ip:
// link-local (169.254.0.0/16, fe80::/10, where metadata services
// answer), multicast, unspecified, or a known metadata address.
func forbiddenIP(ip net.IP) bool {
	if ip.IsLinkLocalUnicast() || ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() ||
		ip.IsMulticast() || ip.IsUnspecified() {
		return true
	}
	for _, m := range metadataIPs {
		if m.Equal(ip) {
			return true
		}
	}
	return false
}

// guardDial is the dialer's Control: it runs on the resolved address of
// every connection, so a host name that resolves to a forbidden address
// is refused as surely as the address itself.
func guardDial(_, address string, _ syscall.RawConn) error {
	host, _, err := net.SplitHostPort(address)
	if err != nil {
		host = address
	}
	if ip := net.ParseIP(host); ip != nil && forbiddenIP(ip) {
		return fmt.Errorf("%w: %s is a link-local or metadata address", ErrRefused, ip)
	}
	return nil
}

// checkURL applies the origin policy to a URL the peer is asked to
// follow: https anywhere, http only to loopback or PlainHTTP hosts, and
// never to a forbidden address given literally.
func (c *Client) checkURL(u *url.URL) error {
	switch u.Scheme {
	case "https":
	case "http":
		if !isLoopback(u.Host) && !contains(c.cfg.PlainHTTP, u.Host) {
			return fmt.Errorf("%w: plain http to %s (not loopback, not in plain_http)", ErrRefused, u.Host)
		}
	default:
		return fmt.Errorf("%w: scheme %q", ErrRefused, u.Scheme)
	}
	if ip := net.ParseIP(strings.Trim(u.Hostname(), "[]")); ip != nil && forbiddenIP(ip) {
		return fmt.Errorf("%w: %s is a link-local or metadata address", ErrRefused, ip)
	}
	return nil
}

// NewTransport is the base HTTP transport of every registry client of the
// project: connections are refused to link-local and metadata addresses
// (guardDial runs on every resolved address), connects take at most
// connect, and response headers at most header (0: no bound).
// Transparent decompression is off: lengths and digests must stay the
// registry's.
func NewTransport(connect, header time.Duration) *http.Transport {
	dialer := &net.Dialer{Timeout: connect, KeepAlive: 30 * time.Second, Control: guardDial}
	return &http.Transport{
		Proxy:                 http.ProxyFromEnvironment,
		DialContext:           dialer.DialContext,
		ForceAttemptHTTP2:     true,
		TLSHandshakeTimeout:   connect,
		ResponseHeaderTimeout: header,
		MaxIdleConnsPerHost:   16,
		IdleConnTimeout:       90 * time.Second,
		DisableCompression:    true,
	}
}

// policyTransport applies the origin policy (checkURL) to every request
// a Client sends: to registries, token servers and blob storage alike,
// whoever chose the URL.
type policyTransport struct {
	inner http.RoundTripper
	c     *Client
}

func (t *policyTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	if err := t.c.checkURL(req.URL); err != nil {
		if req.Body != nil {
			req.Body.Close()
		}
		return nil, fmt.Errorf("%s %s://%s%s: %w", req.Method, req.URL.Scheme, req.URL.Host, req.URL.Path, err)
	}
	return t.inner.RoundTrip(req)
}

// maxRedirects bounds the redirects followed for one request.
const maxRedirects = 10

// checkRedirect lets http.Client follow registries' redirects of blob
// GETs to storage under the same policy as the registries themselves
// (checkURL), keeping Range, and never sends the registry's
// Authorization to another host:port (http.Client compares host names
// only, ignoring the port). A refused redirect ends the request with an
// error: its response, body included, is never passed on.
func (c *Client) checkRedirect(req *http.Request, via []*http.Request) error {
	if len(via) >= maxRedirects {
		return fmt.Errorf("%w: stopped after %d redirects", ErrRefused, maxRedirects)
	}
	if err := c.checkURL(req.URL); err != nil {
		return fmt.Errorf("redirect from %s: %w", via[0].URL.Host, err)
	}
	if !strings.EqualFold(req.URL.Host, via[0].URL.Host) {
		req.Header.Del("Authorization")
	}
	return nil
}
