package scheduler

import (
	"strings"
	"testing"
	"time"
)

func TestDefaultConfigIsValid(t *testing.T) {
	if err := Default().Validate(); err != nil {
		t.Fatal(err)
	}
}

func TestValidateNamesEveryField(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*Config)
		fields []string
	}{
		{"zero config", func(c *Config) { *c = Config{} }, []string{
			"peer_ttl", "max_peers", "max_peers_per_source", "max_parents", "max_chunks_per_query", "max_chunks_per_blob", "max_holding_bytes_per_peer", "max_holding_bytes",
			"origin_fetchers", "origin_timeout", "wait_retry", "max_waiters", "lease_timeout", "max_leases_per_peer",
			"feedback_weight", "ref_throughput", "ban_duration", "ban_quorum", "accusation_burst", "accusation_refill",
		}},
		{"weights out of range", func(c *Config) { c.FeedbackWeight = 1.5; c.Jitter = 1 }, []string{"feedback_weight", "jitter"}},
		{"per-peer budget over the total", func(c *Config) { c.MaxHoldingBytes = c.MaxHoldingBytesPerPeer - 1 }, []string{"max_holding_bytes_per_peer"}},
		{"negative durations", func(c *Config) { c.PeerTTL = -time.Second; c.BanDuration = -1 }, []string{"peer_ttl", "ban_duration"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := Default()
			tt.edit(&c)
			err := c.Validate()
			if err == nil {
				t.Fatal("no error")
			}
			for _, f := range tt.fields {
				if !strings.Contains(err.Error(), f+":") {
					t.Errorf("error does not name %s: %v", f, err)
				}
			}
			if _, err := New(c, nil); err == nil {
				t.Error("New accepted an invalid config")
			}
		})
	}
}
