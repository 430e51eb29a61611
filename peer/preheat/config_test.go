package preheat

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := Default().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	c := Default()
	c.BatchChunks = 0
	c.Parallel = 100
	c.OpenTimeout = -1
	c.MaxBootstrapSize = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{"batch_chunks", "parallel", "open_timeout", "max_bootstrap_bytes"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
