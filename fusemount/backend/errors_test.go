package backend

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"syscall"
	"testing"
	"time"

	"damselfly/rafs"
)

func TestClassify(t *testing.T) {
	t.Parallel()
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	tests := []struct {
		name      string
		err       error
		kind      kind
		proxyDown bool
	}{
		{"connection refused", refused, transient, true},
		{"reset", fmt.Errorf("read: %w", syscall.ECONNRESET), transient, true},
		{"unexpected EOF", io.ErrUnexpectedEOF, transient, true},
		{"timeout", fmt.Errorf("%w after 1s: %v", errTimeout, context.DeadlineExceeded), transient, false},
		{"short body", fmt.Errorf("%w: 3 of 4", errShortBody), transient, false},
		{"bad content-range", fmt.Errorf("%w: x", errBadResponse), transient, false},
		{"503", &statusError{Code: 503}, transient, true},
		{"500", &statusError{Code: 500}, transient, true},
		{"429", &statusError{Code: 429}, transient, false},
		{"404", &statusError{Code: 404}, permanent, false},
		{"416", &statusError{Code: 416}, permanent, false},
		{"400", &statusError{Code: 400}, permanent, false},
		{"405", &statusError{Code: 405}, permanent, false},
		{"401", &statusError{Code: 401}, reauth, false},
		{"403", &statusError{Code: 403}, reauth, false},
		{"range from size", fmt.Errorf("%w: past the end", ErrRange), permanent, true},
	}
	for _, tt := range tests {
		if got := classify(tt.err); got != tt.kind {
			t.Errorf("%s: classify got %d, want %d", tt.name, got, tt.kind)
		}
		// proxyDown only matters for transient failures.
		if tt.kind == transient {
			if got := proxyDown(tt.err); got != tt.proxyDown {
				t.Errorf("%s: proxyDown got %v, want %v", tt.name, got, tt.proxyDown)
			}
		}
	}
}

func TestReadErrorMessage(t *testing.T) {
	t.Parallel()
	d := rafs.Digest{0xab}
	base := ReadError{Registry: "http://127.0.0.1:5000", Repo: "library/app", Digest: d, Off: 100, Len: 50}
	tests := []struct {
		name string
		mod  func(*ReadError)
		want []string
	}{
		{"registry", func(e *ReadError) {
			e.Source, e.Attempts, e.Elapsed = SourceRegistry, 7, 3*time.Minute
			e.Err = fmt.Errorf("%w (3m0s): last failure: %w", ErrDeadline, &statusError{Code: 503, Msg: "Service Unavailable"})
		}, []string{"read bytes 100-149 of blob sha256:ab00", "from registry http://127.0.0.1:5000 repository library/app", "(7 attempts in 3m0s)", "retry deadline exceeded", "HTTP 503"}},
		{"proxy", func(e *ReadError) {
			e.Source, e.Proxy, e.Attempts, e.Err = SourceProxy, "http://127.0.0.1:65001", 1, ErrNotFound
		}, []string{"via proxy http://127.0.0.1:65001 from registry http://127.0.0.1:5000", "blob not found"}},
		{"oci", func(e *ReadError) {
			e.Source, e.Dir, e.Err = SourceOCI, "/layout", ErrRange
		}, []string{"from OCI layout /layout: range not satisfiable"}},
	}
	for _, tt := range tests {
		e := base
		tt.mod(&e)
		var err error = &e
		for _, w := range tt.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: got %q, want it to contain %q", tt.name, err, w)
			}
		}
		if !errors.Is(err, errors.Unwrap(err)) {
			t.Errorf("%s: Unwrap does not expose Err", tt.name)
		}
	}
}
