package convert_test

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"damselfly/rafs/convert"
)

// TestIndexToArchive: a docker-archive cannot hold an index, so convert
// --index to one fails before converting, and writes no archive.
func TestIndexToArchive(t *testing.T) {
	t.Parallel()
	layout := writeCorpus(t, "symlinks")
	archive := filepath.Join(t.TempDir(), "image.tar")
	opts := options(t)
	opts.Index = true
	_, err := convert.Convert(t.Context(), "oci:"+layout+":symlinks", "docker-archive:"+archive, opts)
	if !errors.Is(err, errors.ErrUnsupported) || !strings.Contains(err.Error(), "index") {
		t.Errorf("got error %v, want one wrapping errors.ErrUnsupported about the index", err)
	}
	if _, err := os.Stat(archive); !os.IsNotExist(err) {
		t.Errorf("after the failure: stat archive: got %v, want it absent", err)
	}
}
