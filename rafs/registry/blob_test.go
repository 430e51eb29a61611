package registry_test

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

func TestOpenBlob(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, &registrytest.Auth{User: "alice", Pass: "s3cret"})
	data := randBytes(8, 70<<10)
	d := reg.PushBlob(t, "team/app", data)
	var fail atomic.Int32
	reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if strings.Contains(r.URL.Path, "/blobs/") && fail.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	ctx := testCtx(t)
	c := newClient(t, func(c *registry.Config) { c.RetryLimit = 2 })
	ref := registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: reg.BasicAuth()}
	var missing rafs.Digest
	missing[0] = 1

	tests := []struct {
		name     string
		ref      registry.Ref
		blob     rafs.Digest
		failures int32
		wantCode int // 0: the blob's bytes
	}{
		{name: "whole blob", ref: ref, blob: d},
		{name: "after two 503s", ref: ref, blob: d, failures: 2},
		{name: "503s beyond RetryLimit", ref: ref, blob: d, failures: 3, wantCode: http.StatusServiceUnavailable},
		{name: "missing", ref: ref, blob: missing, wantCode: http.StatusNotFound},
		{name: "wrong password", ref: registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: "Basic d3Jvbmc6d3Jvbmc="}, blob: d, wantCode: http.StatusUnauthorized},
	}
	for _, tt := range tests {
		fail.Store(tt.failures)
		rc, size, err := c.OpenBlob(ctx, tt.ref, tt.blob)
		if tt.wantCode != 0 {
			var se *registry.StatusError
			if !errors.As(err, &se) || se.Code != tt.wantCode {
				t.Errorf("%s: got %v, want status %d", tt.name, err, tt.wantCode)
			}
			continue
		}
		if err != nil {
			t.Errorf("%s: %v", tt.name, err)
			continue
		}
		got, err := io.ReadAll(rc)
		rc.Close()
		if err != nil || !bytes.Equal(got, data) || size != int64(len(data)) {
			t.Errorf("%s: got %d bytes (size %d, err %v), want the %d-byte blob", tt.name, len(got), size, err, len(data))
		}
	}
}

// Timeout bounds the wait for the answer, not the body that follows it.
func TestOpenBlobTimeoutIsForHeaders(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, nil)
	data := randBytes(9, 1000)
	d := reg.PushBlob(t, "app", data)
	var stall atomic.Bool
	reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if !strings.Contains(r.URL.Path, "/blobs/") {
			return false
		}
		if stall.Load() {
			time.Sleep(300 * time.Millisecond) // no headers within Timeout
		}
		w.WriteHeader(http.StatusOK)
		w.(http.Flusher).Flush()
		time.Sleep(300 * time.Millisecond) // a slow body, past Timeout
		w.Write(data)
		return true
	})
	c := newClient(t, func(c *registry.Config) { c.Timeout = 150 * time.Millisecond; c.RetryLimit = 0 })
	ref := registry.Ref{Registry: reg.URL, Repo: "app"}
	if err := c.Authenticate(testCtx(t), ref); err != nil {
		t.Fatal(err)
	}
	rc, _, err := c.OpenBlob(testCtx(t), ref, d)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, data) {
		t.Errorf("slow body: got %d bytes, err %v; want the blob", len(got), err)
	}
	stall.Store(true)
	if _, _, err := c.OpenBlob(testCtx(t), ref, d); !registry.IsTransient(err) {
		t.Errorf("late headers: got %v, want a transient timeout", err)
	}
}

func TestAuthenticate(t *testing.T) {
	t.Parallel()
	reg := registrytest.New(t, &registrytest.Auth{User: "alice", Pass: "s3cret"})
	data := randBytes(10, 100)
	d := reg.PushBlob(t, "team/app", data)
	c := newClient(t, nil)
	ctx := testCtx(t)
	ref := registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: reg.BasicAuth()}
	before := reg.TokenFetches.Load()
	if err := c.Authenticate(ctx, ref); err != nil {
		t.Fatal(err)
	}
	if err := c.ReadRange(ctx, ref, d, 0, make([]byte, 10)); err != nil {
		t.Fatal(err)
	}
	if got := reg.TokenFetches.Load() - before; got != 1 {
		t.Errorf("token fetches: got %d, want 1 (the handshake's, kept for the read)", got)
	}
	bad := registry.Ref{Registry: reg.URL, Repo: "team/app", Authorization: "Basic d3Jvbmc6d3Jvbmc="}
	if err := c.Authenticate(ctx, bad); err == nil {
		t.Error("wrong password: got nil error")
	}
}
