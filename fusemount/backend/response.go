package backend

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"damselfly/rafs/registry"
)

// maxErrorBody bounds the body read from an error response for messages.
const maxErrorBody = 1 << 10

// maxDrain bounds what is read past the range so the connection can be
// reused; beyond it the connection is dropped instead.
const maxDrain = 64 << 10

// rangeHeader is the Range value for bytes [off, off+n), n > 0.
func rangeHeader(off int64, n int) string {
	return fmt.Sprintf("bytes=%d-%d", off, off+int64(n)-1)
}

// doRange sends req, a GET carrying rangeHeader(off, len(p)), and fills p
// from the response; see readRange.
func doRange(c *http.Client, req *http.Request, off int64, p []byte) error {
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer func() {
		io.CopyN(io.Discard, resp.Body, maxDrain)
		resp.Body.Close()
	}()
	return readRange(resp, off, p)
}

// readRange fills p with bytes [off, off+len(p)) of the blob from resp,
// the answer to a ranged GET. It accepts 206 with a Content-Range starting
// at off and covering p, or 200 with the whole blob (a server that ignores
// Range), skipping to off. A body that ends early gives errShortBody, a
// non-matching Content-Range errBadResponse, a blob too small for the
// range ErrRange, and any other status a *statusError. p is never
// reported filled unless every byte came from the response.
func readRange(resp *http.Response, off int64, p []byte) error {
	n := int64(len(p))
	switch resp.StatusCode {
	case http.StatusPartialContent:
		cr := resp.Header.Get("Content-Range")
		start, end, total, err := registry.ParseContentRange(cr)
		if err != nil {
			return fmt.Errorf("%w: %w", errBadResponse, err)
		}
		if total >= 0 && off+n > total {
			return fmt.Errorf("%w: bytes %d-%d of a %d-byte blob", ErrRange, off, off+n-1, total)
		}
		if start != off || end < off+n-1 {
			return fmt.Errorf("%w: asked for %s, got Content-Range %q", errBadResponse, rangeHeader(off, len(p)), cr)
		}
	case http.StatusOK:
		if resp.ContentLength >= 0 && resp.ContentLength < off+n {
			return fmt.Errorf("%w: bytes %d-%d of a %d-byte blob", ErrRange, off, off+n-1, resp.ContentLength)
		}
		if skipped, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			return fmt.Errorf("%w: whole-blob answer ended at byte %d, before offset %d: %v", errShortBody, skipped, off, err)
		}
	default:
		return newStatusError(resp)
	}
	if got, err := io.ReadFull(resp.Body, p); err != nil {
		return fmt.Errorf("%w: got %d of %d bytes: %v", errShortBody, got, n, err)
	}
	return nil
}

// newStatusError describes an error response.
func newStatusError(resp *http.Response) *statusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := http.StatusText(resp.StatusCode)
	if s := strings.TrimSpace(string(body)); s != "" {
		msg += ": " + s
	}
	return &statusError{Code: resp.StatusCode, Msg: msg, RetryAfter: registry.ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
}
