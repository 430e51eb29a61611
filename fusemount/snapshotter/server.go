package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"

	snapshotsapi "github.com/containerd/containerd/api/services/snapshots/v1"
	"github.com/containerd/containerd/v2/contrib/snapshotservice"
	"google.golang.org/grpc"
)

// Listen binds containerd's proxy-plugin socket at address. A socket
// file left by a previous run is replaced; a live one (another
// snapshotter answering) is an error. Only root may use it.
func Listen(address string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(address), 0o755); err != nil {
		return nil, fmt.Errorf("socket directory: %w", err)
	}
	if c, err := net.Dial("unix", address); err == nil {
		c.Close()
		return nil, fmt.Errorf("%s: another snapshotter is serving it", address)
	}
	if err := os.Remove(address); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("remove stale socket: %w", err)
	}
	ln, err := net.Listen("unix", address)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(address, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Serve serves s as containerd's snapshots API on ln until ctx is done,
// then stops the server (letting calls in flight finish) and closes ln;
// it returns nil then.
func Serve(ctx context.Context, s *Snapshotter, ln net.Listener) error {
	srv := grpc.NewServer()
	snapshotsapi.RegisterSnapshotsServer(srv, snapshotservice.FromSnapshotter(s))
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return fmt.Errorf("snapshots API on %s: %w", ln.Addr(), err)
	case <-ctx.Done():
		srv.GracefulStop()
		<-served
		return nil
	}
}
