package client

import (
	"strings"
	"testing"
)

func TestPreheatConfigValidate(t *testing.T) {
	t.Parallel()
	if err := DefaultPreheat().Validate(); err != nil {
		t.Fatalf("default: %v", err)
	}
	c := DefaultPreheat()
	c.Schedulers = []string{"/ip4/127.0.0.1/tcp/1"}
	c.MaxJobs = 0
	c.ProgressInterval = 0
	err := c.Validate()
	if err == nil {
		t.Fatal("bad config validated")
	}
	for _, want := range []string{"schedulers[0]", "max_jobs", "progress_interval"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
}
