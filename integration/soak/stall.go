package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

const (
	// stallAfter is how long a read runs before the scheduler's view is
	// saved: far past any healthy read, well before origin_timeout.
	stallAfter = 10 * time.Second
	// maxStallDumps bounds the saved views per run.
	maxStallDumps = 3
)

// watchStalls saves the scheduler's view of peers and origin fetches
// into dir (stall-N-peers.json, stall-N-origin.json) when a read has run
// stallAfter, at most once per stallAfter and maxStallDumps times: a
// read stuck that long waits on something the scheduler knows about (a
// turn nobody fills, a parent that does not serve), and what it knew is
// gone once the run ends. It returns the number of views saved.
func watchStalls(ctx context.Context, readers []*reader, schedURL, dir string) int {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	dumps := 0
	var last time.Time
	for dumps < maxStallDumps {
		select {
		case <-ctx.Done():
			return dumps
		case now := <-t.C:
			if stuck(readers, stallAfter) == 0 || now.Sub(last) < stallAfter {
				continue
			}
			last = now
			dumps++
			for _, what := range []string{"peers", "origin"} {
				saveAdmin(ctx, schedURL+"/api/v1/"+what, filepath.Join(dir, fmt.Sprintf("stall-%d-%s.json", dumps, what)))
			}
		}
	}
	return dumps
}

// saveAdmin writes the body of GET url into path; failures are written
// in its place.
func saveAdmin(ctx context.Context, url, path string) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	body, err := func() ([]byte, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return nil, err
		}
		defer resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return nil, fmt.Errorf("%s: %s", url, resp.Status)
		}
		return io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	}()
	if err != nil {
		body = []byte(fmt.Sprintf("{\"error\": %q}\n", err.Error()))
	}
	_ = os.WriteFile(path, body, 0o644)
}
