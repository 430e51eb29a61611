package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"
)

// forwardedRequestHeaders are copied from the client's request to the
// registry; Authorization travels in the Ref.
var forwardedRequestHeaders = []string{"Accept", "Range", "If-None-Match", "If-Match", "If-Modified-Since", "User-Agent"}

// forwardedResponseHeaders are copied from the registry's answer to the
// client.
var forwardedResponseHeaders = []string{
	"Content-Type", "Content-Length", "Content-Range", "Accept-Ranges",
	"Docker-Content-Digest", "Docker-Distribution-Api-Version", "ETag",
	"Last-Modified", "Link", "WWW-Authenticate", "Retry-After", "OCI-Filters-Applied",
}

// Forward passes the client's GET or HEAD r through to the registry of
// ref, at path (the registry path with its query, "/v2/NAME/manifests/REF"),
// and writes the registry's answer to w: the status code as it is, the
// headers in forwardedResponseHeaders and the body. The client's
// Authorization (ref.Authorization) is forwarded; a 401 the client must
// answer (a bearer challenge, when the client sent a token or there are
// no node credentials) reaches the client unchanged, so it authenticates
// as it would directly. Without a client Authorization the node's
// credentials are used. Transient failures are retried before anything
// is written. A registry that cannot be reached gives 502 (504 on a
// timeout). Forward returns the body bytes written and the error that
// ended the exchange, if any, for logging.
func (c *Client) Forward(ctx context.Context, w http.ResponseWriter, r *http.Request, ref Ref, path string) (int64, error) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		return 0, fmt.Errorf("forward %s: method not allowed", r.Method)
	}
	base, err := c.registryOf(ref)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return 0, err
	}
	if !strings.HasPrefix(path, "/v2/") {
		http.Error(w, "bad path", http.StatusBadRequest)
		return 0, fmt.Errorf("forward: path %q is not under /v2/", path)
	}
	u := base + path
	build := func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, r.Method, u, nil)
		if err != nil {
			return nil, err
		}
		for _, h := range forwardedRequestHeaders {
			for _, v := range r.Header.Values(h) {
				req.Header.Add(h, v)
			}
		}
		// No transparent gzip: lengths and digests must stay the registry's.
		req.Header.Set("Accept-Encoding", "identity")
		return req, nil
	}

	var resp *http.Response
	for attempt := 0; ; attempt++ {
		resp, err = c.send(ctx, ref, build, false)
		retry := (err != nil && IsTransient(err)) ||
			(err == nil && (resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests))
		if !retry || attempt >= c.cfg.RetryLimit || ctx.Err() != nil {
			break // the last answer goes to the client, body and all
		}
		transient := err
		if resp != nil {
			transient = newStatusError(resp)
			drain(resp)
			resp = nil
		}
		wait := backoff(attempt+1, retryAfter(transient))
		c.log.Warn("upstream forward failed, retrying", "url", u, "attempt", attempt+1, "after", wait.Round(time.Millisecond), "err", transient)
		if serr := sleep(ctx, wait); serr != nil {
			err = serr
			break
		}
	}
	if resp == nil {
		if err == nil {
			err = errors.New("no response")
		}
		code := http.StatusBadGateway
		if errors.Is(err, context.DeadlineExceeded) {
			code = http.StatusGatewayTimeout
		}
		if ctx.Err() == nil {
			http.Error(w, fmt.Sprintf("upstream %s: %v", base, err), code)
		}
		return 0, fmt.Errorf("forward %s: %w", u, err)
	}
	defer resp.Body.Close()
	for _, h := range forwardedResponseHeaders {
		for _, v := range resp.Header.Values(h) {
			w.Header().Add(h, v)
		}
	}
	w.WriteHeader(resp.StatusCode)
	if r.Method == http.MethodHead {
		return 0, nil
	}
	n, err := io.Copy(w, resp.Body)
	if err != nil {
		return n, fmt.Errorf("forward %s: body: %w", u, err)
	}
	if resp.ContentLength >= 0 && n != resp.ContentLength {
		return n, fmt.Errorf("forward %s: body: %w: %d of %d bytes", u, errShortBody, n, resp.ContentLength)
	}
	return n, nil
}
