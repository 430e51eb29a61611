package preheat

import (
	"errors"
	"io"
	"log"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

// pushBombs serves the rafstest bombs from an in-process registry and
// returns its host; each bomb is tagged bombs:NAME.
func pushBombs(t *testing.T) string {
	t.Helper()
	s := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(s.Close)
	host := strings.TrimPrefix(s.URL, "http://")
	for _, b := range rafstest.Bombs() {
		img, err := b.Image()
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(host+"/bombs:"+b.Name, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
			t.Fatalf("push %s: %v", b.Name, err)
		}
	}
	return host
}

// A scheduler that asks this peer to preheat an image whose bootstrap
// layer is a bomb (under 200 KiB, inflating to gigabytes or asking for
// them) gets a clear error before any chunk is fetched, and the peer
// allocates a few MiB at most. Not parallel: it counts the process's
// allocations.
func TestPreheatRefusesBootstrapBombs(t *testing.T) {
	host := pushBombs(t)
	p := &Worker{cfg: Default()}
	for _, b := range rafstest.Bombs() {
		t.Run(b.Name, func(t *testing.T) {
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			before := m.TotalAlloc
			start := time.Now()
			img, _, err := p.open(t.Context(), "docker://"+host+"/bombs:"+b.Name, nil)
			took := time.Since(start)
			runtime.ReadMemStats(&m)
			grew := m.TotalAlloc - before
			if err == nil {
				img.Close()
			}
			if err == nil || !strings.Contains(err.Error(), b.Want) {
				t.Errorf("got %v, want an error saying %q", err, b.Want)
			}
			if grew > 16<<20 {
				t.Errorf("refusing allocated %d bytes, want at most 16 MiB", grew)
			}
			t.Logf("refused in %v, allocating %d bytes: %v", took, grew, err)
		})
	}
	// The configured limit is the one applied.
	small := &Worker{cfg: Default()}
	small.cfg.MaxBootstrapSize = 256 << 20
	_, _, err := small.open(t.Context(), "docker://"+host+"/bombs:declares-500m", nil)
	if !errors.Is(err, rafs.ErrTooLarge) || !strings.Contains(err.Error(), "the limit is 268435456") {
		t.Errorf("limit 256 MiB: got %v, want ErrTooLarge naming it", err)
	}
}
