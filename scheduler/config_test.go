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
			"PeerTTL", "MaxPeers", "MaxPeersPerSource", "MaxParents", "MaxChunksPerQuery", "MaxChunksPerBlob", "MaxHoldingBytesPerPeer", "MaxHoldingBytes",
			"OriginFetchers", "OriginTimeout", "WaitRetry", "MaxWaiters", "LeaseTimeout", "MaxLeasesPerPeer",
			"FeedbackWeight", "RefThroughput", "BanDuration", "BanQuorum", "AccusationBurst", "AccusationRefill",
		}},
		{"weights out of range", func(c *Config) { c.FeedbackWeight = 1.5; c.Jitter = 1 }, []string{"FeedbackWeight", "Jitter"}},
		{"per-peer budget over the total", func(c *Config) { c.MaxHoldingBytes = c.MaxHoldingBytesPerPeer - 1 }, []string{"MaxHoldingBytesPerPeer"}},
		{"negative durations", func(c *Config) { c.PeerTTL = -time.Second; c.BanDuration = -1 }, []string{"PeerTTL", "BanDuration"}},
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
