package proxy_test

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		mod  func(*proxy.Config)
		want string
	}{
		{"default", func(*proxy.Config) {}, ""},
		{"zero", func(c *proxy.Config) { *c = proxy.Config{} }, "listen"},
		{"zero timeouts", func(c *proxy.Config) { *c = proxy.Config{Listen: proxy.DefaultListen} }, "read_header_timeout"},
		{"ipv6 loopback", func(c *proxy.Config) { c.Listen = "[::1]:0" }, ""},
		{"localhost", func(c *proxy.Config) { c.Listen = "localhost:7950" }, ""},
		{"remote refused", func(c *proxy.Config) { c.Listen = "0.0.0.0:7950" }, "listen"},
		{"empty host refused", func(c *proxy.Config) { c.Listen = ":7950" }, "listen"},
		{"remote allowed", func(c *proxy.Config) { c.Listen = "0.0.0.0:7950"; c.AllowRemote = true }, ""},
		{"no port", func(c *proxy.Config) { c.Listen = "127.0.0.1" }, "listen"},
		{"negative", func(c *proxy.Config) { c.ReadTimeout = -1; c.MaxHeaderBytes = -1 }, "max_header_bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := proxy.Default()
			tc.mod(&c)
			err := c.Validate()
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("got %v, want valid", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want an error naming %s", err, tc.want)
			}
		})
	}
	up, err := registry.New(registry.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cfg := proxy.Default()
	cfg.Listen = "0.0.0.0:0"
	if _, err := proxy.New(cfg, &registrySource{up: up}, up, nil, nil); err == nil {
		t.Error("New with a non-loopback listen address: got nil error")
	}
}

func TestSlowHeadersTimeOut(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{cfg: func(c *proxy.Config) { c.ReadHeaderTimeout = 200 * time.Millisecond }})
	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: x\r\n")); err != nil {
		t.Fatal(err)
	}
	// The server must close the connection; the test's own deadline only
	// bounds a server that never does.
	conn.SetReadDeadline(time.Now().Add(20 * time.Second))
	_, err = io.Copy(io.Discard, conn)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatal("the server kept a connection with unfinished headers open")
	}
}

func TestUnixSocketAndShutdown(t *testing.T) {
	t.Parallel()
	sock := filepath.Join(t.TempDir(), "proxy.sock")
	up, err := registry.New(registry.Default(), nil)
	if err != nil {
		t.Fatal(err)
	}
	defer up.Close()
	cfg := proxy.Default()
	cfg.Listen = "127.0.0.1:0"
	cfg.UnixSocket = sock
	srv, err := proxy.New(cfg, &registrySource{up: up}, up, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := srv.Listen(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()

	tr := &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		var d net.Dialer
		return d.DialContext(ctx, "unix", sock)
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr}
	// Listen has bound the socket: connections queue until Serve accepts.
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, "http://unix/healthz", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatalf("GET /healthz over the unix socket: %v", err)
	}
	body, _ := io.ReadAll(bufio.NewReader(resp.Body))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || string(body) != "ok" {
		t.Errorf("unix socket /healthz: got %d %q, want 200 ok", resp.StatusCode, body)
	}
	if !strings.HasPrefix(srv.URL(), "http://127.0.0.1:") {
		t.Errorf("URL: got %q, want http://127.0.0.1:PORT", srv.URL())
	}
}

// slowSource delivers its first chunk only after wait, checking that the
// request is still alive then.
type slowSource struct {
	inner proxy.ChunkSource
	wait  time.Duration
}

func (s *slowSource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	select {
	case <-time.After(s.wait):
	case <-ctx.Done():
		return &chunkapi.ChunkError{Index: 0, Err: fmt.Errorf("request cancelled while waiting: %w", ctx.Err())}
	}
	return s.inner.ReadChunks(ctx, up, blob, chunks, deliver)
}

func TestLongBatchOutlivesReadTimeout(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{
		cfg: func(c *proxy.Config) { c.ReadTimeout = 100 * time.Millisecond },
		source: func(up *registry.Client) proxy.ChunkSource {
			return &slowSource{inner: &registrySource{up: up}, wait: 500 * time.Millisecond}
		},
	})
	img := buildImage(t, e.reg, "rafs/app")
	n, err := readAll(t, chunkapi.NewClient(e.url, nil), registry.Ref{Registry: e.reg.URL, Repo: "rafs/app"}, img, img.chunks[:2])
	if err != nil || n != 2 {
		t.Errorf("batch longer than ReadTimeout: delivered %d, err %v", n, err)
	}
}

// doneSource reports each ReadChunks' end on done.
type doneSource struct {
	inner proxy.ChunkSource
	done  chan error
}

func (s *doneSource) ReadChunks(ctx context.Context, up registry.Ref, blob rafs.Digest, chunks []rafs.Chunk,
	deliver func(i int, c rafs.Chunk, stored []byte) error) error {
	err := s.inner.ReadChunks(ctx, up, blob, chunks, deliver)
	s.done <- err
	return err
}

func TestStalledReaderCutOff(t *testing.T) {
	t.Parallel()
	done := make(chan error, 4)
	e := newEnv(t, envOptions{
		cfg: func(c *proxy.Config) { c.WriteStallTimeout = 200 * time.Millisecond },
		source: func(up *registry.Client) proxy.ChunkSource {
			return &doneSource{inner: &registrySource{up: up}, done: done}
		},
	})
	img := buildImage(t, e.reg, "rafs/app")
	big := img.chunks[0]
	for _, c := range img.chunks {
		if c.CompressedSize > big.CompressedSize {
			big = c
		}
	}
	// 64 MiB of frames: far more than socket buffers hold.
	n := min(chunkapi.MaxBatchChunks, chunkapi.MaxBatchBytes/int(max(big.CompressedSize, big.Size)))
	chunks := make([]map[string]any, n)
	for i := range chunks {
		chunks[i] = map[string]any{"digest": big.Digest.String(), "offset": big.CompressedOffset, "stored": big.CompressedSize,
			"size": big.Size, "flags": big.Flags, "ordinal": big.Ordinal}
	}
	body, _ := json.Marshal(map[string]any{"repo": "rafs/app", "blob": img.blob.String(), "chunks": chunks})

	conn, err := net.Dial("tcp", strings.TrimPrefix(e.url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n%s: %s\r\n\r\n",
		chunkapi.BatchPath, len(body), chunkapi.HeaderRegistry, e.reg.URL)
	if _, err := conn.Write(body); err != nil {
		t.Fatal(err)
	}
	// Never read: the server must give up on the stalled write and end
	// the fetch.
	select {
	case err := <-done:
		if err == nil {
			t.Error("the batch completed into a reader that never read")
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the server kept writing to a stalled reader")
	}
}
