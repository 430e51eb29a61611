package transport

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// countingTransport counts round trips and the User-Agent headers seen.
type countingTransport struct {
	trips, withUA atomic.Int64
	ua            string
}

func (c *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	c.trips.Add(1)
	if strings.Contains(req.Header.Get("User-Agent"), c.ua) {
		c.withUA.Add(1)
	}
	return remote.DefaultTransport.RoundTrip(req)
}

// countingKeychain counts Resolve calls and answers anonymously.
type countingKeychain struct{ calls atomic.Int64 }

func (k *countingKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	k.calls.Add(1)
	return authn.Anonymous, nil
}

func TestOptionsAreUsed(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	img := randomImage(t)
	d, _ := firstLayer(t, img)
	rt := &countingTransport{ua: "damselfly-test/1"}
	kc := &countingKeychain{}
	opts := Options{Transport: rt, Keychain: kc, UserAgent: rt.ua}
	r := mustParse(t, "docker://"+host+"/test/img:t")
	if err := WriteImage(t.Context(), r, img, opts); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadImage(t.Context(), r, opts); err != nil {
		t.Fatal(err)
	}
	rc, err := BlobRange(t.Context(), r, d, 0, 1, opts)
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	if rt.trips.Load() == 0 || kc.calls.Load() == 0 {
		t.Errorf("got %d round trips and %d keychain calls, want both used", rt.trips.Load(), kc.calls.Load())
	}
	if rt.withUA.Load() != rt.trips.Load() {
		t.Errorf("got User-Agent on %d of %d requests, want all", rt.withUA.Load(), rt.trips.Load())
	}
}

func TestDefaultPlatform(t *testing.T) {
	t.Parallel()
	p := Options{}.platform()
	if p.OS == "" || p.Architecture == "" {
		t.Errorf("got default platform %q, want GOOS/GOARCH", p)
	}
	want := v1.Platform{OS: "linux", Architecture: "arm64"}
	if got := (Options{Platform: &want}).platform(); got.String() != want.String() {
		t.Errorf("got %s, want %s", got.String(), want.String())
	}
}

func TestBadRefAndCancelledContext(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	d, _ := firstLayer(t, img)
	cancelled, cancel := context.WithCancel(t.Context())
	cancel()
	good := mustParse(t, "oci:"+t.TempDir()+":v1")
	ops := map[string]func(context.Context, Ref) error{
		"ReadImage":  func(ctx context.Context, r Ref) error { _, err := ReadImage(ctx, r, Options{}); return err },
		"ReadIndex":  func(ctx context.Context, r Ref) error { _, _, err := ReadIndex(ctx, r, Options{}); return err },
		"WriteImage": func(ctx context.Context, r Ref) error { return WriteImage(ctx, r, img, Options{}) },
		"WriteIndex": func(ctx context.Context, r Ref) error {
			idx, _ := platformIndex(t, linuxAMD64)
			return WriteIndex(ctx, r, idx, Options{})
		},
		"Blob":      func(ctx context.Context, r Ref) error { _, _, err := Blob(ctx, r, d, Options{}); return err },
		"BlobRange": func(ctx context.Context, r Ref) error { _, err := BlobRange(ctx, r, d, 0, 1, Options{}); return err },
	}
	for name, op := range ops {
		if err := op(t.Context(), Ref{Transport: "ftp", Path: "/x"}); !errors.Is(err, ErrBadReference) {
			t.Errorf("%s with unknown transport: got %v, want ErrBadReference", name, err)
		}
		if err := op(cancelled, good); !errors.Is(err, context.Canceled) {
			t.Errorf("%s with cancelled context: got %v, want context.Canceled", name, err)
		}
	}
}
