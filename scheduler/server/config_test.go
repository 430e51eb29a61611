package server

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := Default().Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := Default()
	bad.Admin.Listen = "0.0.0.0:7947"
	bad.State.MaxParents = 0
	bad.State.MaxChunksPerBlob = 1 << 30
	bad.ExpireInterval = 0
	bad.MaxStreamsPerPeer = -1
	bad.RequestsPerPeer = -1
	bad.RequestBurstPerPeer = -2
	err := bad.Validate()
	if err == nil {
		t.Fatal("got nil error for a bad config")
	}
	for _, want := range []string{"admin.listen", "state.max_parents", "state.max_chunks_per_blob", "expire_interval", "max_streams_per_peer", "requests_per_peer", "request_burst_per_peer"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not name %s", err, want)
		}
	}
	ok := Default()
	ok.Admin.Listen = "0.0.0.0:7947"
	ok.Admin.AllowRemote = true
	if err := ok.Validate(); err != nil {
		t.Errorf("allowed non-loopback admin: %v", err)
	}
	for _, l := range []string{"localhost:1", "[::1]:7947", "127.0.0.2:80"} {
		ok.Admin = AdminConfig{Listen: l}
		if err := ok.Validate(); err != nil {
			t.Errorf("admin %s: %v", l, err)
		}
	}
}
