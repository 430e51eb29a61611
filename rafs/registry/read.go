package registry

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"

	"damselfly/rafs"
)

// MaxRange bounds one ReadRange.
const MaxRange = 256 << 20

// ReadRange fills p with bytes [off, off+len(p)) of blob in ref's
// repository: one ranged GET, following redirects, answering bearer
// challenges (with the client's Basic credentials, the node's, or
// anonymously), and retrying transient failures up to RetryLimit times.
// It returns nil only when all of p came from the registry. Errors are
// a *StatusError for an error status (IsTransient tells 5xx/429 from
// 401/403/404), ErrRange for bytes beyond the blob, or a network error.
// p must not be used by the caller until ReadRange returns.
func (c *Client) ReadRange(ctx context.Context, ref Ref, blob rafs.Digest, off int64, p []byte) error {
	return c.ReadRangeFunc(ctx, ref, blob, off, p, nil)
}

// ReadRangeFunc is ReadRange that also tells progress, while the bytes
// arrive, how much of p is filled: progress(n) is called on the calling
// goroutine each time p[:n] has grown, n up to len(p). Bytes once
// reported are final: a retry after a transient failure asks only for
// the rest, so the caller may read p[:n] as soon as progress(n) is called
// (and not write it). progress may be nil.
func (c *Client) ReadRangeFunc(ctx context.Context, ref Ref, blob rafs.Digest, off int64, p []byte, progress func(n int)) error {
	if len(p) == 0 {
		return nil
	}
	if !ValidRepo(ref.Repo) {
		return fmt.Errorf("read %s: bad repository name %q", blob, ref.Repo)
	}
	if off < 0 || len(p) > MaxRange {
		return fmt.Errorf("read %s [%d, +%d): bad range", blob, off, len(p))
	}
	var err error
	done := 0
	report := func(n int) {
		if progress != nil {
			progress(done + n)
		}
	}
	for attempt := 0; ; attempt++ {
		var got int
		got, err = c.readOnce(ctx, ref, blob, off+int64(done), p[done:], report)
		done += got
		if err == nil || !IsTransient(err) || attempt >= c.cfg.RetryLimit || ctx.Err() != nil {
			break
		}
		// A warning: the read that waits for it may take up to Timeout
		// longer, and nothing else would say why.
		wait := backoff(attempt+1, retryAfter(err))
		c.log.Warn("upstream read failed, retrying", "registry", ref.Registry, "repo", ref.Repo, "blob", blob,
			"attempt", attempt+1, "after", wait.Round(time.Millisecond), "err", err)
		if serr := sleep(ctx, wait); serr != nil {
			break
		}
	}
	if err != nil {
		return fmt.Errorf("read %s/%s bytes %d-%d: %w", ref.Repo, blob, off, off+int64(len(p))-1, err)
	}
	return nil
}

// ReadRangeOnce is ReadRange without its retries: one ranged GET (after
// a handshake, if one is due), for callers that run their own retry loop
// (the mount's, with its read deadline and its proxy fallback). A 401
// still makes the next request start from a fresh handshake. Errors are
// ReadRange's, not wrapped.
func (c *Client) ReadRangeOnce(ctx context.Context, ref Ref, blob rafs.Digest, off int64, p []byte) error {
	if len(p) == 0 {
		return nil
	}
	if !ValidRepo(ref.Repo) {
		return fmt.Errorf("read %s: bad repository name %q", blob, ref.Repo)
	}
	if off < 0 || len(p) > MaxRange {
		return fmt.Errorf("read %s [%d, +%d): bad range", blob, off, len(p))
	}
	_, err := c.readOnce(ctx, ref, blob, off, p, nil)
	return err
}

// readOnce is one ranged GET for p, reporting progress as readRange
// does. It returns how many bytes of p it filled.
func (c *Client) readOnce(ctx context.Context, ref Ref, blob rafs.Digest, off int64, p []byte, report func(n int)) (int, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	base, err := c.registryOf(ref)
	if err != nil {
		return 0, err
	}
	u := base + "/v2/" + ref.Repo + "/blobs/" + blob.String()
	rng := rangeHeader(off, len(p))
	resp, err := c.send(ctx, ref, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Range", rng)
		req.Header.Set("Accept-Encoding", "identity")
		return req, nil
	}, true)
	if err != nil {
		return 0, err
	}
	defer drain(resp)
	return readRange(resp, off, p, report)
}

// rangeHeader is the Range value for bytes [off, off+n), n > 0.
func rangeHeader(off int64, n int) string {
	return fmt.Sprintf("bytes=%d-%d", off, off+int64(n)-1)
}

// readRange fills p with bytes [off, off+len(p)) from resp, the answer
// to a ranged GET: a 206 whose Content-Range starts at off and covers p,
// or a 200 with the whole blob (a server that ignores Range). It calls
// report(n), if not nil, each time p[:n] has grown, and returns how many
// bytes of p it filled.
func readRange(resp *http.Response, off int64, p []byte, report func(n int)) (int, error) {
	n := int64(len(p))
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr := resp.Header.Get("Content-Range")
		start, end, total, err := ParseContentRange(cr)
		if err != nil {
			return 0, fmt.Errorf("%w: %w", errBadResponse, err)
		}
		if total >= 0 && off+n > total {
			return 0, fmt.Errorf("%w: bytes %d-%d of a %d-byte blob", ErrRange, off, off+n-1, total)
		}
		if start != off || end < off+n-1 {
			return 0, fmt.Errorf("%w: asked for %s, got Content-Range %q", errBadResponse, rangeHeader(off, len(p)), cr)
		}
	case http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength < off+n {
			return 0, fmt.Errorf("%w: bytes %d-%d of a %d-byte blob", ErrRange, off, off+n-1, resp.ContentLength)
		}
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return 0, fmt.Errorf("%w: whole-blob answer ended before offset %d: %w", errShortBody, off, err)
		}
	case http.StatusRequestedRangeNotSatisfiable:
		return 0, fmt.Errorf("%w: %w", ErrRange, newStatusError(resp))
	default:
		return 0, newStatusError(resp)
	}
	got := 0
	for got < len(p) {
		k, err := resp.Body.Read(p[got:])
		got += k
		if k > 0 && report != nil {
			report(got)
		}
		if err != nil && got < len(p) {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF
			}
			return got, fmt.Errorf("%w: got %d of %d bytes: %w", errShortBody, got, n, err)
		}
	}
	return got, nil
}

// parseContentRange parses "bytes START-END/TOTAL"; total is -1 for "*".
func ParseContentRange(s string) (start, end, total int64, err error) {
	bad := fmt.Errorf("malformed Content-Range %q", s)
	spec, ok := strings.CutPrefix(s, "bytes ")
	if !ok {
		return 0, 0, 0, bad
	}
	rng, size, ok := strings.Cut(spec, "/")
	if !ok {
		return 0, 0, 0, bad
	}
	first, last, ok := strings.Cut(rng, "-")
	if !ok {
		return 0, 0, 0, bad
	}
	if start, err = strconv.ParseInt(first, 10, 64); err != nil || start < 0 {
		return 0, 0, 0, bad
	}
	if end, err = strconv.ParseInt(last, 10, 64); err != nil || end < start {
		return 0, 0, 0, bad
	}
	total = -1
	if size != "*" {
		if total, err = strconv.ParseInt(size, 10, 64); err != nil || total <= end {
			return 0, 0, 0, bad
		}
	}
	return start, end, total, nil
}

// parseRetryAfter reads Retry-After as seconds or an HTTP date relative
// to now; 0 if absent or malformed.
func ParseRetryAfter(s string, now time.Time) time.Duration {
	if s == "" {
		return 0
	}
	if secs, err := strconv.Atoi(s); err == nil && secs > 0 {
		return time.Duration(min(secs, 3600)) * time.Second
	}
	if t, err := http.ParseTime(s); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}
