package registry

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"damselfly/rafs"
)

// OpenBlob streams the whole of blob from ref's repository: one GET,
// following redirects and answering bearer challenges as ReadRange does.
// Transient failures before the body starts (network errors, 5xx, 429)
// are retried up to RetryLimit times; the answer's headers must come
// within Timeout, and the body then streams for as long as ctx allows. A
// failure in the body is the reader's error and is not retried: a stream
// cannot be resumed under its reader's hash. It returns the body, which
// the caller must close, and its size, -1 if the registry sent no
// Content-Length. The bytes are not checked against blob; the caller
// hashes them as it reads. Errors are a *StatusError for an error status
// (404 for a blob the repository lacks), or a network error.
func (c *Client) OpenBlob(ctx context.Context, ref Ref, blob rafs.Digest) (io.ReadCloser, int64, error) {
	if !ValidRepo(ref.Repo) {
		return nil, 0, fmt.Errorf("open %s: bad repository name %q", blob, ref.Repo)
	}
	base, err := c.registryOf(ref)
	if err != nil {
		return nil, 0, err
	}
	u := base + "/v2/" + ref.Repo + "/blobs/" + blob.String()
	for attempt := 0; ; attempt++ {
		var body io.ReadCloser
		var size int64
		body, size, err = c.openOnce(ctx, ref, u)
		if err == nil {
			return body, size, nil
		}
		if !IsTransient(err) || attempt >= c.cfg.RetryLimit || ctx.Err() != nil {
			break
		}
		wait := backoff(attempt+1, retryAfter(err))
		c.log.Warn("upstream blob open failed, retrying", "registry", ref.Registry, "repo", ref.Repo, "blob", blob,
			"attempt", attempt+1, "after", wait.Round(time.Millisecond), "err", err)
		if serr := sleep(ctx, wait); serr != nil {
			break
		}
	}
	return nil, 0, fmt.Errorf("open %s/%s: %w", ref.Repo, blob, err)
}

// openOnce is one GET of the whole blob at u. Timeout bounds the wait for
// the answer, not the body: the request's context is cancelled by a timer
// that is stopped once the headers are in, and by the body's Close.
func (c *Client) openOnce(ctx context.Context, ref Ref, u string) (io.ReadCloser, int64, error) {
	ctx, cancel := context.WithCancel(ctx)
	timer := time.AfterFunc(c.cfg.Timeout, cancel)
	resp, err := c.send(ctx, ref, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept-Encoding", "identity")
		return req, nil
	}, true)
	if !timer.Stop() {
		if err == nil {
			drain(resp)
		}
		cancel()
		return nil, 0, fmt.Errorf("no answer within %v: %w", c.cfg.Timeout, context.DeadlineExceeded)
	}
	if err != nil {
		cancel()
		return nil, 0, err
	}
	if resp.StatusCode != http.StatusOK {
		err := newStatusError(resp)
		drain(resp)
		cancel()
		return nil, 0, err
	}
	return &cancelBody{ReadCloser: resp.Body, cancel: cancel}, resp.ContentLength, nil
}

// cancelBody is a response body that releases its request's context when
// closed.
type cancelBody struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (b *cancelBody) Close() error {
	err := b.ReadCloser.Close()
	b.cancel()
	return err
}

// Authenticate does now the handshake the first request for ref's
// repository and credentials would do (the registry's version check,
// and a pull token where the registry asks for one), unless the Client
// keeps a session for them: a caller can fail early on credentials the
// registry refuses or a registry it cannot reach, and its first read
// then pays for no handshake. Reads do not need it. Config.Timeout
// bounds the handshake, ctx only the wait for it.
func (c *Client) Authenticate(ctx context.Context, ref Ref) error {
	if !ValidRepo(ref.Repo) {
		return fmt.Errorf("authenticate: bad repository name %q", ref.Repo)
	}
	base, err := c.registryOf(ref)
	if err != nil {
		return err
	}
	creds, keychain := c.credentials(ref, base)
	_, err = c.session(ctx, sessionKey(base, ref.Repo, creds, keychain), base, ref.Repo, creds, keychain)
	return err
}
