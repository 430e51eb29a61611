package cricreds

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"sync"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// fakeCRI is containerd's CRI ImageService as far as these tests go: it
// records what reached it, and during a pull looks at what the store
// holds then (containerd asks the snapshotter while it pulls).
type fakeCRI struct {
	runtimeapi.UnimplementedImageServiceServer
	store *Store
	fail  error

	mu       sync.Mutex
	pulls    []string
	duringPW []string // the password the store held for the image during each pull
	removed  []string
}

func (f *fakeCRI) PullImage(_ context.Context, r *runtimeapi.PullImageRequest) (*runtimeapi.PullImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	cfg, _ := f.store.Lookup(r.GetImage().GetImage())
	f.pulls = append(f.pulls, r.GetImage().GetImage())
	f.duringPW = append(f.duringPW, cfg.Password)
	if f.fail != nil {
		return nil, f.fail
	}
	return &runtimeapi.PullImageResponse{ImageRef: "sha256:1234"}, nil
}

func (f *fakeCRI) RemoveImage(_ context.Context, r *runtimeapi.RemoveImageRequest) (*runtimeapi.RemoveImageResponse, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.removed = append(f.removed, r.GetImage().GetImage())
	return &runtimeapi.RemoveImageResponse{}, nil
}

func (f *fakeCRI) ListImages(context.Context, *runtimeapi.ListImagesRequest) (*runtimeapi.ListImagesResponse, error) {
	return &runtimeapi.ListImagesResponse{Images: []*runtimeapi.Image{{Id: "sha256:1234"}}}, nil
}

func (f *fakeCRI) StreamImages(_ *runtimeapi.StreamImagesRequest, out grpc.ServerStreamingServer[runtimeapi.StreamImagesResponse]) error {
	for _, id := range []string{"a", "b"} {
		if err := out.Send(&runtimeapi.StreamImagesResponse{Images: []*runtimeapi.Image{{Id: id}}}); err != nil {
			return err
		}
	}
	return nil
}

// serve starts the fake backend and the Service in front of it, each on
// a unix socket, and returns a client of the Service.
func serve(t *testing.T, store *Store, backend *fakeCRI) runtimeapi.ImageServiceClient {
	t.Helper()
	dir := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	t.Cleanup(func() { cancel(); wg.Wait() })
	bln, err := Listen(filepath.Join(dir, "containerd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	bsrv := grpc.NewServer()
	runtimeapi.RegisterImageServiceServer(bsrv, backend)
	wg.Add(1)
	go func() { defer wg.Done(); bsrv.Serve(bln) }()
	t.Cleanup(bsrv.Stop)

	cl, closer, err := Dial(filepath.Join(dir, "containerd.sock"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { closer.Close() })
	ln, err := Listen(filepath.Join(dir, "proxy.sock"))
	if err != nil {
		t.Fatal(err)
	}
	wg.Add(1)
	go func() { defer wg.Done(); Serve(ctx, NewService(store, cl, nil), ln) }()
	conn, err := grpc.NewClient("unix://"+filepath.Join(dir, "proxy.sock"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return runtimeapi.NewImageServiceClient(conn)
}

func pull(ctx context.Context, c runtimeapi.ImageServiceClient, image, pw string) error {
	r := &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: image}}
	if pw != "" {
		r.Auth = &runtimeapi.AuthConfig{Username: "u", Password: pw}
	}
	_, err := c.PullImage(ctx, r)
	return err
}

// PullImage records the credentials before the pull reaches containerd
// and forwards it; a failed pull leaves the earlier credentials; other
// calls pass through, streams included; a pull naming no image is
// refused before containerd sees it.
func TestServiceForwardsAndRecords(t *testing.T) {
	t.Parallel()
	store := NewStore()
	backend := &fakeCRI{store: store}
	c := serve(t, store, backend)
	ctx := t.Context()
	const img = "reg.example/team/app:v1"
	if err := pull(ctx, c, img, "good"); err != nil {
		t.Fatal(err)
	}
	backend.fail = status.Error(codes.Unauthenticated, "401 from the registry")
	if err := pull(ctx, c, img, "bad"); status.Code(err) != codes.Unauthenticated {
		t.Errorf("a failed pull: got %v, want the backend's Unauthenticated", err)
	}
	backend.fail = nil
	if got, _ := store.Lookup(img); got.Password != "good" {
		t.Errorf("after a failed pull the store holds %+v, want the last good credentials", got)
	}
	if want := []string{"good", "bad"}; len(backend.duringPW) != 2 || backend.duringPW[0] != want[0] || backend.duringPW[1] != want[1] {
		t.Errorf("credentials in the store while containerd pulled: %v, want %v", backend.duringPW, want)
	}
	if _, err := c.PullImage(ctx, &runtimeapi.PullImageRequest{}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("a pull without an image: got %v, want InvalidArgument", err)
	}
	if len(backend.pulls) != 2 {
		t.Errorf("pulls that reached containerd: %v, want 2", backend.pulls)
	}
	if _, err := c.RemoveImage(ctx, &runtimeapi.RemoveImageRequest{Image: &runtimeapi.ImageSpec{Image: img}}); err != nil {
		t.Fatal(err)
	}
	if len(backend.removed) != 1 {
		t.Errorf("RemoveImage did not reach containerd: %v", backend.removed)
	}
	if _, ok := store.Lookup(img); !ok {
		t.Errorf("RemoveImage dropped the repository's credentials; its other images may still be mounted")
	}
	if res, err := c.ListImages(ctx, &runtimeapi.ListImagesRequest{}); err != nil || len(res.Images) != 1 {
		t.Errorf("ListImages: %v, %v", res, err)
	}
	st, err := c.StreamImages(ctx, &runtimeapi.StreamImagesRequest{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for {
		m, err := st.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatalf("StreamImages: %v", err)
		}
		ids = append(ids, m.Images[0].Id)
	}
	if len(ids) != 2 {
		t.Errorf("StreamImages relayed %v, want a and b", ids)
	}
	// ImageFsInfo is not implemented by the fake: the backend's error
	// comes back as it is.
	if _, err := c.ImageFsInfo(ctx, &runtimeapi.ImageFsInfoRequest{}); status.Code(err) != codes.Unimplemented {
		t.Errorf("ImageFsInfo: got %v, want the backend's Unimplemented", err)
	}
}

// With containerd not (yet) listening, a pull fails Unavailable and
// leaves no credentials behind.
func TestServiceBackendDown(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cl, closer, err := Dial(filepath.Join(dir, "nobody.sock"))
	if err != nil {
		t.Fatal(err)
	}
	defer closer.Close()
	store := NewStore()
	s := NewService(store, cl, nil)
	_, err = s.PullImage(t.Context(), &runtimeapi.PullImageRequest{Image: &runtimeapi.ImageSpec{Image: "reg.example/app:v1"},
		Auth: &runtimeapi.AuthConfig{Username: "u", Password: "p"}})
	if status.Code(err) != codes.Unavailable {
		t.Errorf("got %v, want Unavailable", err)
	}
	if _, ok := store.Lookup("reg.example/app:v1"); ok {
		t.Errorf("credentials of a pull that never reached containerd were kept")
	}
	if _, _, err := Dial("relative.sock"); err == nil {
		t.Errorf("Dial of a relative path succeeded")
	}
}
