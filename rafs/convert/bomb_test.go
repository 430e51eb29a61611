package convert_test

import (
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
)

// A chunk dictionary whose bootstrap layer is a bomb (under 200 KiB,
// inflating to gigabytes or asking for them) fails the conversion with
// a clear error before any building, allocating a few MiB at most, and
// writes nothing. Not parallel: it counts the process's allocations.
func TestChunkDictBombs(t *testing.T) {
	src := writeCorpus(t, "base-v1")
	bombs := filepath.Join(t.TempDir(), "bombs")
	if err := rafstest.WriteBombLayout(bombs); err != nil {
		t.Fatal(err)
	}
	for _, b := range rafstest.Bombs() {
		t.Run(b.Name, func(t *testing.T) {
			opts := options(t)
			opts.ChunkDict = "oci:" + bombs + ":" + b.Name
			dst := "oci:" + filepath.Join(t.TempDir(), "out") + ":base-v1-rafs"
			var m runtime.MemStats
			runtime.ReadMemStats(&m)
			before := m.TotalAlloc
			start := time.Now()
			_, err := convert.Convert(t.Context(), "oci:"+src+":base-v1", dst, opts)
			took := time.Since(start)
			runtime.ReadMemStats(&m)
			grew := m.TotalAlloc - before
			if err == nil || !strings.Contains(err.Error(), "chunk dictionary") || !strings.Contains(err.Error(), b.Want) {
				t.Errorf("got %v, want a chunk dictionary error saying %q", err, b.Want)
			}
			if grew > 32<<20 {
				t.Errorf("refusing allocated %d bytes, want at most 32 MiB", grew)
			}
			requireAbsent(t, dst, opts.WorkDir)
			t.Logf("refused in %v, allocating %d bytes: %v", took, grew, err)
		})
	}
}
