package registry

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"
)

// maxErrorBody bounds what is read of an error response for its message.
const maxErrorBody = 1 << 10

// StatusError is an error answer from the registry (or its token server).
// 401, 403 and 404 are permanent: retrying does not help. 5xx and 429 are
// transient.
type StatusError struct {
	Code int
	// Msg is the status text and the start of the response body.
	Msg string
	// RetryAfter is the server's Retry-After, 0 if none.
	RetryAfter time.Duration
}

func (e *StatusError) Error() string {
	return fmt.Sprintf("registry answered %d: %s", e.Code, e.Msg)
}

// Transient reports whether the same request may succeed later.
func (e *StatusError) Transient() bool {
	return e.Code >= 500 || e.Code == http.StatusTooManyRequests || e.Code == http.StatusRequestTimeout
}

// errShortBody is returned when a response ends before the bytes asked for.
var errShortBody = errors.New("registry response ended early")

// errBadResponse is a response that does not answer the request (a
// Content-Range for other bytes, say). It is transient: a proxy or
// storage backend misbehaving once.
var errBadResponse = errors.New("registry response does not match the request")

// ErrRange is returned (wrapped) when a range lies beyond the blob's end.
var ErrRange = errors.New("range beyond the end of the blob")

// IsTransient reports whether err may go away on retry: a network
// failure, a response cut short, a 5xx or 429 StatusError, or a timeout.
// Cancellation by the caller is not transient; nor are 4xx answers, bad
// configuration, ErrRange, or a TLS failure that only configuration
// fixes (https to a plain-HTTP server, a certificate that does not
// verify).
func IsTransient(err error) bool {
	if err == nil || errors.Is(err, context.Canceled) {
		return false
	}
	var se *StatusError
	if errors.As(err, &se) {
		return se.Transient()
	}
	if errors.Is(err, ErrRange) || errors.Is(err, ErrRefused) || errors.Is(err, ErrNoRegistry) || isTLSMismatch(err) {
		return false
	}
	var nerr net.Error
	return errors.As(err, &nerr) || errors.Is(err, errShortBody) || errors.Is(err, errBadResponse) ||
		errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, context.DeadlineExceeded)
}

// newStatusError describes an error response, reading a bounded part of
// its body.
func newStatusError(resp *http.Response) *StatusError {
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
	msg := http.StatusText(resp.StatusCode)
	if s := strings.TrimSpace(string(body)); s != "" {
		msg += ": " + s
	}
	return &StatusError{Code: resp.StatusCode, Msg: msg, RetryAfter: ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
}

// isTLSMismatch reports whether err is a TLS failure that retrying cannot
// fix: the server answered a TLS handshake in plain HTTP (a plain-HTTP
// registry not listed in plain_http), or its certificate did not verify.
func isTLSMismatch(err error) bool {
	var rh tls.RecordHeaderError
	var cv *tls.CertificateVerificationError
	var ua x509.UnknownAuthorityError
	var hn x509.HostnameError
	var ci x509.CertificateInvalidError
	return errors.Is(err, http.ErrSchemeMismatch) || errors.As(err, &rh) || errors.As(err, &cv) || errors.As(err, &ua) || errors.As(err, &hn) || errors.As(err, &ci)
}
