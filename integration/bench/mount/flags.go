package main

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"damselfly/integration/bench/shaper"
)

// profile is an emulated link, named as on the command line.
type profile struct {
	Name string        `json:"name"`
	Link shaper.Config `json:"link"`
}

// knownProfiles are the links the issue reports.
var knownProfiles = map[string]shaper.Config{
	"1g":   {Bandwidth: 1e9, RTT: 2 * time.Millisecond},
	"200m": {Bandwidth: 200e6, RTT: 20 * time.Millisecond},
}

// parseProfiles reads "1g,200m" or custom "RATE@RTT" entries such as
// "500m@10ms" (RATE in bit/s with an optional k, m or g suffix).
func parseProfiles(s string) ([]profile, error) {
	var out []profile
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		if name == "" {
			continue
		}
		if link, ok := knownProfiles[name]; ok {
			out = append(out, profile{Name: name, Link: link})
			continue
		}
		rate, rtt, ok := strings.Cut(name, "@")
		if !ok {
			return nil, fmt.Errorf("profile %q: want 1g, 200m or RATE@RTT", name)
		}
		bw, err := parseRate(rate)
		if err != nil {
			return nil, fmt.Errorf("profile %q: %w", name, err)
		}
		d, err := time.ParseDuration(rtt)
		if err != nil || d < 0 {
			return nil, fmt.Errorf("profile %q: bad RTT %q", name, rtt)
		}
		out = append(out, profile{Name: name, Link: shaper.Config{Bandwidth: bw, RTT: d}})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no profile in %q", s)
	}
	return out, nil
}

func parseRate(s string) (int64, error) {
	mult := int64(1)
	switch {
	case strings.HasSuffix(s, "g"):
		mult, s = 1e9, strings.TrimSuffix(s, "g")
	case strings.HasSuffix(s, "m"):
		mult, s = 1e6, strings.TrimSuffix(s, "m")
	case strings.HasSuffix(s, "k"):
		mult, s = 1e3, strings.TrimSuffix(s, "k")
	}
	v, err := strconv.ParseFloat(s, 64)
	if err != nil || v <= 0 {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	return int64(v * float64(mult)), nil
}

// coldConfig is a mount configuration tried for the cold read.
type coldConfig struct {
	// Tag is the RAFS tag mounted: rafs (default), or rafs-startup, the
	// image converted with its startup set as prefetch patterns.
	Tag         string `json:"tag,omitempty"`
	Name        string `json:"name"`
	AmplifyIO   int    `json:"amplify_io"`
	PrefetchAll bool   `json:"prefetch_all"`
	KernelImage bool   `json:"kernel_image,omitempty"`
	Lazy        bool   `json:"kernel_image_lazy,omitempty"`
}

// parseColdConfigs reads "1m,4m,1m+all,1m+kernel,1m+kernel+lazy":
// amplify_io in MiB, +all for prefetch_all, +kernel for kernel_image
// (then the warm read, which uses the first config, reads the kernel
// image), +lazy for kernel_image.lazy (cold reads through EROFS over the
// daemon's image file too).
func parseColdConfigs(s string) ([]coldConfig, error) {
	var out []coldConfig
	for _, c := range strings.Split(s, ",") {
		c = strings.TrimSpace(c)
		if c == "" {
			continue
		}
		size, lazy := strings.CutSuffix(c, "+lazy")
		size, kernel := strings.CutSuffix(size, "+kernel")
		kernel = kernel || lazy
		size, all := strings.CutSuffix(size, "+all")
		mib, err := strconv.Atoi(strings.TrimSuffix(size, "m"))
		if err != nil || !strings.HasSuffix(size, "m") || mib < 1 || mib > 64 {
			return nil, fmt.Errorf("cold config %q: want NNm with any of +all, +kernel, +lazy in that order (amplify_io in MiB, 1..64)", c)
		}
		onOff := map[bool]string{true: "on", false: "off"}
		name := fmt.Sprintf("amplify_io %d MiB, prefetch_all %s", mib, onOff[all])
		if kernel {
			name += ", kernel_image on"
		}
		if lazy {
			name += ", lazy"
		}
		out = append(out, coldConfig{Name: name, AmplifyIO: mib << 20, PrefetchAll: all, KernelImage: kernel, Lazy: lazy})
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("no cold config in %q", s)
	}
	return out, nil
}

func parseInts(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil || n < 1 {
			return nil, fmt.Errorf("bad count %q", f)
		}
		out = append(out, n)
	}
	return out, nil
}

// serveShaper runs one shaping proxy in the foreground, to reproduce a
// row by hand against a registry started separately.
func serveShaper(ctx context.Context, upstream string, p profile) error {
	px, err := shaper.New(upstream, p.Link)
	if err != nil {
		return err
	}
	fmt.Fprintf(os.Stderr, "shaper: %s -> %s (%s); interrupt to stop\n", px.Addr(), upstream, p.Link)
	return px.Run(ctx)
}
