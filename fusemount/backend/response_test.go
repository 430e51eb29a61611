package backend

import (
	"errors"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestReadRange(t *testing.T) {
	t.Parallel()
	const blob = "0123456789abcdefghij" // 20 bytes
	resp := func(code int, body string, hdr ...string) *http.Response {
		r := &http.Response{StatusCode: code, Header: http.Header{}, Body: io.NopCloser(strings.NewReader(body)), ContentLength: -1}
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Content-Length" {
				n, err := strconv.ParseInt(hdr[i+1], 10, 64)
				if err != nil {
					t.Fatal(err)
				}
				r.ContentLength = n
				continue
			}
			r.Header.Set(hdr[i], hdr[i+1])
		}
		return r
	}
	tests := []struct {
		name    string
		resp    *http.Response
		off, n  int
		want    string
		wantErr error
	}{
		{"206", resp(206, "5678", "Content-Range", "bytes 5-8/20"), 5, 4, "5678", nil},
		{"206 unknown total", resp(206, "5678", "Content-Range", "bytes 5-8/*"), 5, 4, "5678", nil},
		{"206 longer than asked", resp(206, "56789", "Content-Range", "bytes 5-9/20"), 5, 4, "5678", nil},
		{"206 wrong start", resp(206, "6789", "Content-Range", "bytes 6-9/20"), 5, 4, "", errBadResponse},
		{"206 shorter range", resp(206, "56", "Content-Range", "bytes 5-6/20"), 5, 4, "", errBadResponse},
		{"206 no Content-Range", resp(206, "5678"), 5, 4, "", errBadResponse},
		{"206 past the end", resp(206, "ij", "Content-Range", "bytes 18-19/20"), 18, 4, "", ErrRange},
		{"206 short body", resp(206, "56", "Content-Range", "bytes 5-8/20"), 5, 4, "", errShortBody},
		{"200 whole blob", resp(200, blob, "Content-Length", "20"), 5, 4, "5678", nil},
		{"200 unknown length", resp(200, blob), 16, 4, "ghij", nil},
		{"200 too small", resp(200, blob, "Content-Length", "20"), 18, 4, "", ErrRange},
		{"200 short body before off", resp(200, blob[:3]), 5, 4, "", errShortBody},
		{"200 short body in range", resp(200, blob[:7]), 5, 4, "", errShortBody},
		{"404", resp(404, `{"errors":[{"code":"BLOB_UNKNOWN"}]}`), 0, 4, "", ErrNotFound},
		{"416", resp(416, ""), 0, 4, "", ErrRange},
		{"400", resp(400, ""), 0, 4, "", ErrBadRequest},
		{"401", resp(401, ""), 0, 4, "", ErrUnauthorized},
		{"405 is permanent", resp(405, ""), 0, 4, "", errPermanent},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := make([]byte, tt.n)
			err := readRange(tt.resp, int64(tt.off), p)
			if tt.wantErr != nil {
				if !errors.Is(err, tt.wantErr) {
					t.Fatalf("got %v, want %v", err, tt.wantErr)
				}
				return
			}
			if err != nil || string(p) != tt.want {
				t.Fatalf("got %q, %v; want %q", p, err, tt.want)
			}
		})
	}
}

func TestReadRangeTransientStatus(t *testing.T) {
	t.Parallel()
	for _, code := range []int{408, 429, 500, 502, 503, 504} {
		r := &http.Response{StatusCode: code, Header: http.Header{"Retry-After": {"7"}}, Body: io.NopCloser(strings.NewReader("busy"))}
		err := readRange(r, 0, make([]byte, 1))
		if k := classify(err); k != transient {
			t.Errorf("%d: got kind %d, want transient", code, k)
		}
		if got := retryAfter(err); got != 7*time.Second {
			t.Errorf("%d: Retry-After got %s, want 7s", code, got)
		}
		if !strings.Contains(err.Error(), "busy") {
			t.Errorf("%d: got %q, want the body in the message", code, err)
		}
	}
}
