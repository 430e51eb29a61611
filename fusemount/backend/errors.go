package backend

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"damselfly/rafs"
)

// Sentinel errors that callers may branch on with [errors.Is]. The first
// four fail a read at once; ErrDeadline ends one that kept failing
// transiently.
var (
	// ErrNotFound: the blob does not exist (HTTP 404, or no file in the
	// OCI layout).
	ErrNotFound = errors.New("blob not found")
	// ErrRange: the range lies outside the blob (HTTP 416, or a size that
	// ends before it).
	ErrRange = errors.New("range not satisfiable")
	// ErrBadRequest: the server refused the request as malformed (HTTP 400).
	ErrBadRequest = errors.New("bad request")
	// ErrUnauthorized: credentials were refused (HTTP 401 or 403) even
	// after a fresh token.
	ErrUnauthorized = errors.New("unauthorized")
	// ErrDeadline: transient failures went on past Config.Deadline.
	ErrDeadline = errors.New("retry deadline exceeded")
	// ErrClosed: the Backend was closed.
	ErrClosed = errors.New("backend closed")
)

// Internal markers, never returned alone.
var (
	// errPermanent marks a failure that retrying cannot fix (an
	// unexpected status, a refused certificate).
	errPermanent = errors.New("not retryable")
	// errTimeout marks an attempt that ran out of Config.Timeout. It does
	// not wrap context.DeadlineExceeded, which callers read as "the
	// caller gave up".
	errTimeout = errors.New("request timed out")
	// errReadDeadline is the cause of an attempt's context ending when
	// the read's Config.Deadline passes.
	errReadDeadline = errors.New("read deadline reached")
	// errShortBody marks a response that ended before the range did.
	errShortBody = errors.New("response shorter than the range")
	// errBadResponse marks a response that does not carry the range asked
	// for (a wrong or malformed Content-Range).
	errBadResponse = errors.New("response does not match the range")
)

// ReadError describes a failed read: where it went, what it asked for,
// how long it tried and why it failed. Err wraps the sentinels above, or
// the caller's context error when ctx ended the read.
type ReadError struct {
	Source   Source // the source of the last attempt; empty if none was made
	Registry string // "scheme://host" of the registry, for type registry
	Repo     string
	Proxy    string // the proxy URL, when Source is SourceProxy
	Dir      string // the layout directory, for type oci
	Digest   rafs.Digest
	Off, Len int64
	Attempts int
	Elapsed  time.Duration
	Err      error
}

func (e *ReadError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "read bytes %d-%d of blob %s", e.Off, e.Off+e.Len-1, e.Digest)
	switch {
	case e.Dir != "":
		fmt.Fprintf(&b, " from OCI layout %s", e.Dir)
	case e.Source == SourceProxy:
		fmt.Fprintf(&b, " via proxy %s from registry %s repository %s", e.Proxy, e.Registry, e.Repo)
	default:
		fmt.Fprintf(&b, " from registry %s repository %s", e.Registry, e.Repo)
	}
	if e.Attempts > 1 {
		fmt.Fprintf(&b, " (%d attempts in %s)", e.Attempts, e.Elapsed.Round(time.Millisecond))
	}
	b.WriteString(": ")
	b.WriteString(e.Err.Error())
	return b.String()
}

func (e *ReadError) Unwrap() error { return e.Err }

// statusError is an HTTP answer other than the range: its status, a
// snippet of its body, and the wait the server asked for.
type statusError struct {
	Code       int
	Msg        string        // status text and body snippet
	RetryAfter time.Duration // from Retry-After, 0 if none
	cause      error         // the go-containerregistry error, if any
}

func (e *statusError) Error() string { return fmt.Sprintf("HTTP %d: %s", e.Code, e.Msg) }

// Unwrap gives the sentinel the status maps to, so errors.Is works on
// the chain, and the underlying cause.
func (e *statusError) Unwrap() []error {
	var out []error
	if s := statusSentinel(e.Code); s != nil {
		out = append(out, s)
	}
	if e.cause != nil {
		out = append(out, e.cause)
	}
	return out
}

// statusSentinel maps a status to a sentinel, nil for a transient one.
func statusSentinel(code int) error {
	switch {
	case code == http.StatusNotFound:
		return ErrNotFound
	case code == http.StatusRequestedRangeNotSatisfiable:
		return ErrRange
	case code == http.StatusBadRequest:
		return ErrBadRequest
	case code == http.StatusUnauthorized, code == http.StatusForbidden:
		return ErrUnauthorized
	case code == http.StatusRequestTimeout, code == http.StatusTooManyRequests, code >= 500:
		return nil
	default:
		return errPermanent
	}
}

// kind is what the read loop does after a failed attempt.
type kind int

const (
	transient kind = iota // retry with backoff until the deadline
	permanent             // fail the read (or bypass the proxy)
	reauth                // get a fresh token and retry once
)

func classify(err error) kind {
	switch {
	case errors.Is(err, ErrUnauthorized):
		return reauth
	case errors.Is(err, ErrNotFound), errors.Is(err, ErrRange),
		errors.Is(err, ErrBadRequest), errors.Is(err, errPermanent):
		return permanent
	default:
		return transient
	}
}

// proxyDown reports whether err shows the proxy itself failing: it could
// not be reached, dropped the connection, or answered 5xx. Slow or short
// answers and 429 count toward RetryLimit instead.
func proxyDown(err error) bool {
	if errors.Is(err, errTimeout) || errors.Is(err, errShortBody) || errors.Is(err, errBadResponse) {
		return false
	}
	var se *statusError
	if errors.As(err, &se) {
		return se.Code >= 500
	}
	return true
}

// retryAfter is the wait a 429 or 503 asked for, 0 if none.
func retryAfter(err error) time.Duration {
	var se *statusError
	if errors.As(err, &se) {
		return se.RetryAfter
	}
	return 0
}
