package fusemount

import (
	"errors"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

// Mounting an image whose bootstrap layer is a bomb (under 200 KiB,
// inflating to gigabytes or asking for them) fails before anything is
// mounted, with the error that names it, allocating a few MiB at most.
// No FUSE is needed: the bootstrap is read before the mount. Not
// parallel: it counts the process's allocations.
func TestMountRefusesBootstrapBombs(t *testing.T) {
	bombs := filepath.Join(t.TempDir(), "bombs")
	if err := rafstest.WriteBombLayout(bombs); err != nil {
		t.Fatal(err)
	}
	for _, b := range rafstest.Bombs() {
		t.Run(b.Name, func(t *testing.T) {
			opts := Options{Image: "oci:" + bombs + ":" + b.Name, Mountpoint: t.TempDir(), Config: testConfig(t)}
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			before := m.TotalAlloc
			start := time.Now()
			err := Run(t.Context(), opts)
			took := time.Since(start)
			runtime.ReadMemStats(&m)
			grew := m.TotalAlloc - before
			if err == nil || !strings.Contains(err.Error(), b.Want) {
				t.Errorf("got %v, want an error saying %q", err, b.Want)
			}
			if grew > 16<<20 {
				t.Errorf("refusing allocated %d bytes, want at most 16 MiB", grew)
			}
			t.Logf("refused in %v, allocating %d bytes: %v", took, grew, err)
		})
	}
}

// max_bootstrap_bytes reaches the reader: under it, the 500 MiB bomb is
// refused for its size, before anything is inflated.
func TestMountMaxBootstrapBytes(t *testing.T) {
	bombs := filepath.Join(t.TempDir(), "bombs")
	if err := rafstest.WriteBombLayout(bombs); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig(t)
	cfg.MaxBootstrapBytes = 256 << 20
	err := Run(t.Context(), Options{Image: "oci:" + bombs + ":declares-500m", Mountpoint: t.TempDir(), Config: cfg})
	if !errors.Is(err, rafs.ErrTooLarge) || !strings.Contains(err.Error(), "the limit is 268435456") {
		t.Errorf("got %v, want ErrTooLarge naming the configured limit", err)
	}
	cfg.MaxBootstrapBytes = 1000
	if err := Run(t.Context(), Options{Image: "oci:" + bombs + ":declares-500m", Mountpoint: t.TempDir(), Config: cfg}); err == nil || !strings.Contains(err.Error(), "max_bootstrap_bytes") {
		t.Errorf("limit of 1000 bytes: got %v, want the config refused", err)
	}
}
