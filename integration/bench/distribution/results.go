package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// notesMarker starts the hand-written part of RESULTS.md (what the
// figures mean, what to do about them): writeResults keeps everything
// from it on.
const notesMarker = "<!-- notes: written by hand, kept by make bench-results -->"

// writeResults writes the benchmark report (RESULTS.md) to file from the
// reports the harnesses left in out: distribution.json, and convert.md,
// mount.md, deployed.md, pulls.md and snapshotter.md where those
// harnesses ran. The notes of an existing file (from
// notesMarker on) are kept at its end. Beside it, RESULTS.json gathers
// the harnesses' JSON reports.
func writeResults(file, out string) error {
	rep, err := loadReport(out)
	if err != nil {
		return err
	}
	var notes string
	switch old, err := os.ReadFile(file); {
	case err == nil:
		if i := strings.Index(string(old), notesMarker); i >= 0 {
			notes = string(old[i:])
		}
	case !errors.Is(err, fs.ErrNotExist):
		return err
	}
	var b strings.Builder
	b.WriteString("# damselfly benchmark results\n\n")
	fmt.Fprintf(&b, "Generated %s by `make bench` (`go run ./integration/bench/distribution -results %s`) from the reports in `%s`, on %s; "+
		"load average at generation %s. Each section says when its figures were measured; the machine is shared, so the load "+
		"average before each run is recorded beside it.\n\n", time.Now().UTC().Format(time.RFC3339), file, out, machine(), loadavg())

	b.WriteString("## P2P distribution (issues 4 and 5)\n\n")
	if len(rep.Scenarios) == 0 {
		b.WriteString("Not measured: `make bench-distribution`.\n\n")
	} else {
		b.WriteString("N nodes pull the same image at once: each reads every chunk of every blob through its peer daemon's batch endpoint " +
			"(4 requests of 4 chunks in flight), all in one process on loopback. The origin is an in-process registry behind a shaped " +
			"link; each node's traffic toward the origin crosses its own shaped link and then the origin's, its uploads to peers are " +
			"capped by the exchange's upload limit, and everything it receives by a token bucket at its link rate. Targets: with P2P the " +
			"origin sends at most 1.05x the image for 8 nodes (issue 4), and the p50 and p99 completion times are within 1.5x of the bound " +
			"(issue 5).\n\n")
		b.WriteString("The bound is the physical floor. Every node has to receive the whole image over its own link (image/node rate), and " +
			"the origin has to send it at least once (image/origin rate); with P2P the last chunk the origin sends must still be relayed by a " +
			"peer (plus one chunk/node rate). The cluster's total upload (origin plus every node's uplink) never binds, since " +
			"nodes x image/(origin + nodes x node rate) is below image/node rate. Without P2P the origin sends the image once per node " +
			"(nodes x image/origin rate).\n\n")
		b.WriteString(rep.markdown())
		b.WriteString("\n")
	}
	for _, h := range []struct{ name, title, target string }{
		{"convert.md", "Conversion", "make bench-convert"},
		{"mount.md", "Mount and read", "make bench-mount"},
		{"deployed.md", "Deployed distribution: separate processes, network namespaces, kernel-capped links (issue 24)", "make bench-deployed"},
		{"pulls.md", "Plain pulls through the peers' mirrors: separate processes, network namespaces, kernel-capped links (issue 21)", "make bench-pulls"},
		{"snapshotter.md", "Container start through damselfly snapshotter: containerd, RAFS against a full overlayfs pull (issue 22)", "make bench-snapshotter"},
	} {
		fmt.Fprintf(&b, "## %s\n\n", h.title)
		data, err := os.ReadFile(filepath.Join(out, h.name))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			fmt.Fprintf(&b, "Not measured here: `%s`.\n\n", h.target)
			continue
		case err != nil:
			return err
		}
		fmt.Fprintf(&b, "From `%s/%s`:\n\n%s\n", out, h.name, demote(string(data)))
	}
	b.WriteString(notes)
	if err := os.WriteFile(file, []byte(b.String()), 0o644); err != nil {
		return err
	}
	return writeResultsJSON(strings.TrimSuffix(file, filepath.Ext(file))+".json", out)
}

// writeResultsJSON writes file (RESULTS.json, beside RESULTS.md): the
// harnesses' JSON reports in out, each under its name, those that did
// not run left out. Each is checked to be JSON, not parsed further.
func writeResultsJSON(file, out string) error {
	all := map[string]json.RawMessage{}
	for _, name := range []string{"distribution", "convert", "mount", "deployed", "pulls", "snapshotter"} {
		data, err := os.ReadFile(filepath.Join(out, name+".json"))
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return err
		case !json.Valid(data):
			return fmt.Errorf("%s: not JSON", filepath.Join(out, name+".json"))
		}
		all[name] = data
	}
	data, err := json.MarshalIndent(all, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(file, append(data, '\n'), 0o644)
}

// demote moves a harness report's headings two levels down, under the
// section that quotes it.
func demote(md string) string {
	lines := strings.Split(strings.TrimRight(md, "\n"), "\n")
	for i, l := range lines {
		if strings.HasPrefix(l, "#") {
			lines[i] = "##" + l
		}
	}
	return strings.Join(lines, "\n") + "\n"
}
