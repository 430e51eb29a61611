package main

import (
	"archive/tar"
	"context"
	schedd "damselfly/scheduler/daemon"
	"fmt"
	"io"
	"log"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"

	"damselfly/peer/daemon"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
	"damselfly/scheduler/server"
)

// gatedRegistry is an in-process registry whose ranged blob GETs (chunk
// fetches) can be held until released.
type gatedRegistry struct {
	srv    *httptest.Server
	mu     sync.Mutex
	gate   chan struct{}
	inGate atomic.Int64
}

func newGatedRegistry(t *testing.T) *gatedRegistry {
	t.Helper()
	reg := registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	g := &gatedRegistry{}
	g.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Header.Get("Range") != "" {
			g.mu.Lock()
			gate := g.gate
			g.mu.Unlock()
			if gate != nil {
				g.inGate.Add(1)
				select {
				case <-gate:
				case <-r.Context().Done():
				}
				g.inGate.Add(-1)
			}
		}
		reg.ServeHTTP(w, r)
	}))
	t.Cleanup(g.srv.Close)
	t.Cleanup(g.open)
	return g
}

func (g *gatedRegistry) hold() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.gate = make(chan struct{})
}

func (g *gatedRegistry) open() {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.gate != nil {
		close(g.gate)
		g.gate = nil
	}
}

// pushPreheatTestImage converts a one-layer image of two files to RAFS,
// pushes it to g and returns its reference without docker://.
func pushPreheatTestImage(t *testing.T, g *gatedRegistry) string {
	t.Helper()
	var layer rafstest.Layer
	for i, size := range []int{5 * testChunk, 3*testChunk + 10} {
		data := make([]byte, size)
		r := rand.New(rand.NewPCG(uint64(i), 7))
		for j := range data {
			data[j] = byte(r.Uint32())
		}
		layer = append(layer, rafstest.Entry{
			Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: fmt.Sprintf("f%d", i), Mode: 0o644, Size: int64(size), ModTime: time.Unix(1700000000, 0), Format: tar.FormatPAX},
			Data: func(w io.Writer) error { _, err := w.Write(data); return err },
		})
	}
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	layout := filepath.Join(t.TempDir(), "oci")
	if err := rafstest.WriteOCILayout(ctx, layout, rafstest.Image{Name: "app", Layers: []rafstest.Layer{layer}}); err != nil {
		t.Fatal(err)
	}
	ref := strings.TrimPrefix(g.srv.URL, "http://") + "/test/app:rafs"
	if _, err := convert.Convert(ctx, "oci:"+layout+":app", "docker://"+ref, convert.Options{
		Build: rafs.BuildOptions{ChunkSize: testChunk, Prefetch: []string{"/f1"}}, WorkDir: t.TempDir(),
	}); err != nil {
		t.Fatal(err)
	}
	return ref
}

// startPreheatNodes runs a scheduler and n peer daemons in this process
// and waits until the peers are members.
func startPreheatNodes(t *testing.T, n int) (*server.Server, []*daemon.Daemon) {
	t.Helper()
	cfg := schedd.Default(t.TempDir())
	cfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.InsecureOpenCluster = true
	cfg.Host.ClusterKeyFile = ""
	cfg.Admin.Listen = "127.0.0.1:0"
	s, err := schedd.New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	runUntilCleanup(t, "scheduler", s.Run)
	ai := s.AddrInfo()
	var peers []*daemon.Daemon
	for i := range n {
		pc := daemon.Default()
		pc.Dir = t.TempDir()
		pc.Cache.Dir = ""
		pc.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
		pc.Host.InsecureOpenCluster = true
		pc.Proxy.Listen = "127.0.0.1:0"
		pc.Scheduler.Schedulers = []string{fmt.Sprintf("%s/p2p/%s", ai.Addrs[0], ai.ID)}
		pc.Scheduler.HeartbeatInterval = 200 * time.Millisecond
		pc.Labels = map[string]string{"zone": fmt.Sprintf("z%d", i)}
		d, err := daemon.New(pc, nil)
		if err != nil {
			t.Fatal(err)
		}
		runUntilCleanup(t, "peer", d.Run)
		peers = append(peers, d)
	}
	rafstest.Eventually(t, 30*time.Second, "the peers to register", func() bool {
		alive := 0
		for _, p := range s.State().Peers(time.Now()) {
			if p.Alive {
				alive++
			}
		}
		return alive == n
	})
	return s, peers
}

// runUntilCleanup runs run in a goroutine until the test's cleanup.
func runUntilCleanup(t *testing.T, what string, run func(context.Context) error) {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("%s: %v", what, err)
		}
	})
}

// TestPreheatCommand runs `damselfly preheat` against an in-process
// scheduler and two peers: a job that succeeds, one no peer matches, and
// one whose image does not exist.
func TestPreheatCommand(t *testing.T) {
	t.Parallel()
	g := newGatedRegistry(t)
	ref := pushPreheatTestImage(t, g)
	s, peers := startPreheatNodes(t, 2)

	r := run(t, nil, "preheat", ref, "--scheduler", s.AdminURL(), "--all")
	if r.code != 0 || !strings.Contains(r.stdout, " done: 2 peers done, 0 failed, 0 cancelled") {
		t.Fatalf("preheat --all: exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("preheat --all:\n%s%s", r.stderr, r.stdout)
	for i, d := range peers {
		if st := d.Node().Stats(); st.OriginChunks+st.PeerChunks != 9 {
			t.Errorf("peer %d fetched %d chunks, want 9", i, st.OriginChunks+st.PeerChunks)
		}
	}
	r = run(t, nil, "preheat", "docker://"+ref, "--scheduler", s.AdminURL(), "--label", "zone=z1", "--prefetch-only")
	if r.code != 0 || !strings.Contains(r.stdout, " done: 1 peers done") || !strings.Contains(r.stdout, "(4 of 4 chunks)") {
		t.Errorf("preheat --label --prefetch-only: exit %d, stdout %q; stderr:\n%s", r.code, r.stdout, r.stderr)
	}
	r = run(t, nil, "preheat", ref, "--scheduler", s.AdminURL(), "--label", "zone=nowhere")
	if r.code == 0 || !strings.Contains(r.stderr, "no live, unbanned peer matches") {
		t.Errorf("preheat of no peers: exit %d, stderr %q; want a failure naming the cause", r.code, r.stderr)
	}
	missing := strings.Replace(ref, ":rafs", ":missing", 1)
	r = run(t, nil, "preheat", missing, "--scheduler", s.AdminURL(), "--peers", "1")
	if r.code == 0 || !strings.Contains(r.stdout, " failed: 0 peers done, 1 failed") || !strings.Contains(r.stdout, "MANIFEST_UNKNOWN") {
		t.Errorf("preheat of a missing image: exit %d, stdout %q; want a failure naming the peer and cause", r.code, r.stdout)
	}
	r = run(t, nil, "preheat", ref, "--scheduler", s.AdminURL(), "--label", "zone")
	if r.code == 0 || !strings.Contains(r.stderr, "key=value") {
		t.Errorf("bad --label: exit %d, stderr %q", r.code, r.stderr)
	}
}

// TestPreheatCommandInterrupt sends SIGINT to `damselfly preheat` while
// the registry holds the peers' fetches: it cancels the job, waits for
// the scheduler's confirmation and exits non-zero; the peers stop.
func TestPreheatCommandInterrupt(t *testing.T) {
	t.Parallel()
	g := newGatedRegistry(t)
	ref := pushPreheatTestImage(t, g)
	s, peers := startPreheatNodes(t, 2)
	g.hold()

	ctx, cancel := context.WithTimeout(t.Context(), cliTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, binary, "preheat", ref, "--scheduler", s.AdminURL())
	cmd.WaitDelay = 5 * time.Second
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DAMSELFLY_") {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	var stdout, stderr strings.Builder
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	waited := false
	defer func() {
		if !waited {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	}()
	rafstest.Eventually(t, 30*time.Second, "both peers to fetch", func() bool {
		return peers[0].Preheater().Running() == 1 && peers[1].Preheater().Running() == 1 && g.inGate.Load() > 0
	})
	if err := cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	err := cmd.Wait()
	waited = true
	if err == nil {
		t.Fatalf("after SIGINT: exit 0, want non-zero; stdout %q", stdout.String())
	}
	if !strings.Contains(stdout.String(), " cancelled: 0 peers done, 0 failed, 2 cancelled") || !strings.Contains(stderr.String(), "interrupted") {
		t.Errorf("after SIGINT: stdout %q, stderr %q; want the cancelled summary", stdout.String(), stderr.String())
	}
	rafstest.Eventually(t, 30*time.Second, "the peers to stop", func() bool {
		return peers[0].Preheater().Running() == 0 && peers[1].Preheater().Running() == 0 && g.inGate.Load() == 0
	})
}
