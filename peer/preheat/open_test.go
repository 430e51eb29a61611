package preheat

import (
	"strings"
	"testing"
)

func TestPreheatRefusesLocalImages(t *testing.T) {
	t.Parallel()
	p := &Worker{cfg: Default()}
	for _, ref := range []string{"oci:/etc:x", "/etc/passwd", "docker-archive:/tmp/x.tar"} {
		if _, _, err := p.open(t.Context(), ref, nil); err == nil || !strings.Contains(err.Error(), "only docker://") {
			t.Errorf("%s: got %v, want a refusal", ref, err)
		}
	}
}
