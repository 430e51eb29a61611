package snapshotter

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/proxy"
	"github.com/containerd/errdefs"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"damselfly/rafs/rafstest"
)

// TestServeOverGRPC drives the snapshotter the way containerd does, over
// its socket with containerd's proxy client: snapshots made, committed,
// listed and removed, errors crossing the wire as the errdefs kinds
// containerd branches on, and the socket gone after shutdown.
func TestServeOverGRPC(t *testing.T) {
	rafstest.RequireRoot(t)
	dir := t.TempDir()
	cfg := Default()
	cfg.Root = filepath.Join(dir, "root")
	sock := filepath.Join(dir, "sn.sock")
	s, err := New(t.Context(), cfg, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	// A socket file left by a process that is gone is replaced.
	stale, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stale.(*net.UnixListener).SetUnlinkOnClose(false)
	stale.Close()
	ln, err := Listen(sock)
	if err != nil {
		t.Fatalf("listen over a stale socket: %v", err)
	}
	// A live one is not.
	if _, err := Listen(sock); err == nil || !strings.Contains(err.Error(), "another snapshotter") {
		t.Fatalf("listen on a live socket: got %v, want an error", err)
	}
	if st, err := os.Stat(sock); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("socket mode: %v %v, want 0600", st.Mode(), err)
	}

	ctx, cancel := context.WithCancel(t.Context())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, s, ln) }()

	conn, err := grpc.NewClient("unix://"+sock, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	sn := proxy.NewSnapshotter(snapshotsapi.NewSnapshotsClient(conn), "damselfly")
	if _, err := sn.Prepare(ctx, "layer", "", snapshots.WithLabels(map[string]string{"a": "b"})); err != nil {
		t.Fatal(err)
	}
	if err := sn.Commit(ctx, "committed", "layer", snapshots.WithLabels(map[string]string{"a": "b"})); err != nil {
		t.Fatal(err)
	}
	if _, err := sn.Prepare(ctx, "ctr", "committed"); err != nil {
		t.Fatal(err)
	}
	m, err := sn.Mounts(ctx, "ctr")
	if err != nil || len(m) != 1 || m[0].Type != "bind" && m[0].Type != "overlay" {
		t.Fatalf("mounts over gRPC: %+v, %v", m, err)
	}
	info, err := sn.Stat(ctx, "ctr")
	if err != nil || info.Parent != "committed" || info.Kind != snapshots.KindActive {
		t.Fatalf("stat over gRPC: %+v, %v", info, err)
	}
	var names []string
	if err := sn.Walk(ctx, func(_ context.Context, i snapshots.Info) error { names = append(names, i.Name); return nil }, `labels.a==b`); err != nil {
		t.Fatal(err)
	}
	if len(names) != 1 || names[0] != "committed" {
		t.Errorf("walk with a label filter: got %v, want [committed]", names)
	}
	if _, err := sn.Stat(ctx, "missing"); !errdefs.IsNotFound(err) {
		t.Errorf("stat of a missing snapshot: got %v, want not found", err)
	}
	if _, err := sn.Prepare(ctx, "ctr", "committed"); !errdefs.IsAlreadyExists(err) {
		t.Errorf("prepare of an existing key: got %v, want already exists", err)
	}
	if err := sn.Remove(ctx, "committed"); err == nil {
		t.Errorf("removed a snapshot with a child")
	}
	for _, k := range []string{"ctr", "committed"} {
		if err := sn.Remove(ctx, k); err != nil {
			t.Fatal(err)
		}
	}

	cancel()
	select {
	case err := <-served:
		if err != nil {
			t.Fatalf("serve: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("serve did not return after its context ended")
	}
	if _, err := os.Stat(sock); !os.IsNotExist(err) {
		t.Errorf("socket left after shutdown: %v", err)
	}
}
