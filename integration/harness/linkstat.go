package harness

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"time"
)

// LinkBytes is what an interface has received and sent, in bytes of
// whole frames as the kernel counts them (Ethernet, IP and TCP headers
// included).
type LinkBytes struct{ Rx, Tx int64 }

// ReadLink reads eth0's counters in namespace netns (a Host's Netns)
// with `ip -s -j`: what the host's capped link carried.
func ReadLink(ctx context.Context, netns string) (LinkBytes, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, "ip", "-n", netns, "-s", "-j", "link", "show", "eth0").Output()
	if err != nil {
		return LinkBytes{}, fmt.Errorf("ip -n %s -s link show eth0: %w", netns, err)
	}
	return ParseLink(out)
}

// ParseLink reads the counters from `ip -s -j link show DEV`.
func ParseLink(out []byte) (LinkBytes, error) {
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
		return LinkBytes{}, fmt.Errorf("ip -s -j link: %w", err)
	}
	if len(links) != 1 || links[0].Stats.Rx.Bytes == nil || links[0].Stats.Tx.Bytes == nil {
		return LinkBytes{}, fmt.Errorf("ip -s -j link: want one link with stats64 byte counters, got %.200s", out)
	}
	return LinkBytes{Rx: *links[0].Stats.Rx.Bytes, Tx: *links[0].Stats.Tx.Bytes}, nil
}
