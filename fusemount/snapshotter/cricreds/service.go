package cricreds

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// Service is CRI's ImageService in front of containerd's: every call is
// forwarded as it is, and PullImage's credentials are recorded in the
// Store before the pull is forwarded (containerd asks the snapshotter
// about the layers while it pulls) and put back as they were if the
// pull fails.
type Service struct {
	runtimeapi.UnimplementedImageServiceServer
	store   *Store
	backend runtimeapi.ImageServiceClient
	log     *slog.Logger
}

var _ runtimeapi.ImageServiceServer = (*Service)(nil)

// NewService returns a Service recording into store and forwarding to
// backend; log may be nil.
func NewService(store *Store, backend runtimeapi.ImageServiceClient, log *slog.Logger) *Service {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	return &Service{store: store, backend: backend, log: log}
}

// Dial returns a client of the CRI ImageService on the unix socket path
// (containerd's, /run/containerd/containerd.sock). It does not connect
// until the first call, so containerd may start later.
func Dial(path string) (runtimeapi.ImageServiceClient, io.Closer, error) {
	if !filepath.IsAbs(path) {
		return nil, nil, fmt.Errorf("CRI socket %q is not an absolute path", path)
	}
	conn, err := grpc.NewClient("unix://"+path, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return nil, nil, fmt.Errorf("CRI socket %s: %w", path, err)
	}
	return runtimeapi.NewImageServiceClient(conn), conn, nil
}

// Listen removes a stale socket at path and listens there, mode 0600
// (the kubelet runs as root; nobody else may pull with the node's
// identity).
func Listen(path string) (net.Listener, error) {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return nil, err
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, err
	}
	if err := os.Chmod(path, 0o600); err != nil {
		ln.Close()
		return nil, err
	}
	return ln, nil
}

// Serve serves s on ln until ctx is done, then stops gracefully.
func Serve(ctx context.Context, s *Service, ln net.Listener) error {
	srv := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(srv, s)
	served := make(chan error, 1)
	go func() { served <- srv.Serve(ln) }()
	select {
	case err := <-served:
		return err
	case <-ctx.Done():
		srv.GracefulStop()
		<-served
		return nil
	}
}

// PullImage records the request's credentials for the image's
// repository, forwards the pull, and restores the earlier credentials
// if it fails. A request without an image is refused unforwarded.
func (s *Service) PullImage(ctx context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	image := r.GetImage().GetImage()
	prev, had, err := s.store.Set(image, r.GetAuth())
	if err != nil {
		return nil, status.Errorf(codes.InvalidArgument, "pull: %v", err)
	}
	res, err := s.backend.PullImage(ctx, r)
	if err != nil {
		s.store.Restore(image, r.GetAuth(), prev, had)
		return nil, err
	}
	s.log.Info("pull", "image", image, "credentials", r.GetAuth() != nil)
	return res, nil
}

func (s *Service) ListImages(ctx context.Context, r *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return s.backend.ListImages(ctx, r)
}

func (s *Service) ImageStatus(ctx context.Context, r *runtimeapi.ImageStatusRequest) (*runtimeapi.ImageStatusResponse, error) {
	return s.backend.ImageStatus(ctx, r)
}

// RemoveImage is forwarded; the repository's credentials stay, for the
// mount daemons of its other images.
func (s *Service) RemoveImage(ctx context.Context, r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	return s.backend.RemoveImage(ctx, r)
}

func (s *Service) ImageFsInfo(ctx context.Context, r *runtimeapi.ImageFsInfoRequest) (*runtimeapi.ImageFsInfoResponse, error) {
	return s.backend.ImageFsInfo(ctx, r)
}

// StreamImages relays the backend's stream.
func (s *Service) StreamImages(r *runtimeapi.StreamImagesRequest, out grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	in, err := s.backend.StreamImages(out.Context(), r)
	if err != nil {
		return err
	}
	for {
		m, err := in.Recv()
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		if err := out.Send(m); err != nil {
			return err
		}
	}
}
