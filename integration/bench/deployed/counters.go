package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"
)

// linkBytes is what an interface has received and sent, in bytes of
// whole frames as the kernel counts them (Ethernet, IP and TCP headers
// included).
type linkBytes struct{ Rx, Tx int64 }

// readLink reads eth0's counters in namespace netns with `ip -s -j`.
func readLink(ctx context.Context, netns string) (linkBytes, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-n", netns, "-s", "-j", "link", "show", "eth0").Output()
	if err != nil {
		return linkBytes{}, fmt.Errorf("ip -n %s -s link show eth0: %w", netns, err)
	}
	return parseLink(out)
}

// parseLink reads the counters from `ip -s -j link show DEV`.
func parseLink(out []byte) (linkBytes, error) {
	var links []struct {
		Stats struct {
			Rx struct {
				Bytes *int64 `json:"bytes"`
			} `json:"rx"`
			Tx struct {
				Bytes *int64 `json:"bytes"`
			} `json:"tx"`
		} `json:"stats64"`
	}
	if err := json.Unmarshal(out, &links); err != nil {
		return linkBytes{}, fmt.Errorf("ip -s -j link: %w", err)
	}
	if len(links) != 1 || links[0].Stats.Rx.Bytes == nil || links[0].Stats.Tx.Bytes == nil {
		return linkBytes{}, fmt.Errorf("ip -s -j link: want one link with stats64 byte counters, got %.200s", out)
	}
	return linkBytes{Rx: *links[0].Stats.Rx.Bytes, Tx: *links[0].Stats.Tx.Bytes}, nil
}
