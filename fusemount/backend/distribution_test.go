package backend

import (
	"crypto/sha256"
	"net/http"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
	"damselfly/rafs/rafstest"
)

// TestDistributionRegistry reads ranges of a blob pushed to a real
// registry (the Debian docker-registry package, distribution v2).
func TestDistributionRegistry(t *testing.T) {
	t.Parallel()
	host := rafstest.StartRegistry(t)
	data := randomBytes(50, 3<<20+17)
	repo, err := name.NewRepository(host + "/" + testRepo)
	if err != nil {
		t.Fatal(err)
	}
	tr := &http.Transport{}
	t.Cleanup(tr.CloseIdleConnections)
	if err := remote.WriteLayer(repo, static.NewLayer(data, types.OCILayer), remote.WithTransport(tr), remote.WithContext(t.Context())); err != nil {
		t.Fatalf("push blob: %v", err)
	}
	blob := rafs.Blob{Digest: sha256.Sum256(data), CompressedSize: uint64(len(data))}

	b := newBackend(t, testConfig(host))
	size := int64(len(data))
	for _, rg := range []struct {
		off int64
		n   int
	}{{0, 1}, {0, 4096}, {1 << 20, 1 << 20}, {size - 1, 1}, {size - 5000, 5000}, {0, len(data)}, {123457, 98765}} {
		if src := readAt(t, b, blob, data, rg.off, rg.n); src != SourceRegistry {
			t.Errorf("source: got %s, want %s", src, SourceRegistry)
		}
	}
	if st := b.Stats().Registry; st.Errors != 0 || st.Requests != 7 {
		t.Errorf("stats: got %+v, want 7 requests without errors", st)
	}
}
