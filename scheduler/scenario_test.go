package scheduler

import (
	"flag"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
)

var update = flag.Bool("update", false, "rewrite the expected outputs of testdata/scenarios")

// TestScenarios runs the scripts under testdata/scenarios: each is a
// story told as commands to one State, each command followed by the
// output it must give (see scenarioRunner.run for the commands).
// Blocks are
//
//	# comments, kept as they are
//	command key=value ... flag
//	----
//	output lines
//
// separated by blank lines. With -update the outputs are rewritten from
// what the State does now: read the diff before committing it.
func TestScenarios(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "scenarios", "*.txt"))
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no scenarios under testdata/scenarios")
	}
	for _, file := range files {
		t.Run(strings.TrimSuffix(filepath.Base(file), ".txt"), func(t *testing.T) {
			t.Parallel()
			runScenarioFile(t, file)
		})
	}
}

// scenarioBlock is one command of a script and the output it wants.
type scenarioBlock struct {
	comments []string
	gap      bool // a blank line between the comments and cmd
	cmd      string
	line     int // of cmd, for messages
	want     string
}

func parseScenario(t *testing.T, file string) (blocks []scenarioBlock, trailer []string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var comments []string
	gap := false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		switch {
		case strings.TrimSpace(l) == "":
			gap = len(comments) > 0
			continue
		case strings.HasPrefix(l, "#"):
			comments = append(comments, l)
			gap = false
			continue
		}
		b := scenarioBlock{comments: comments, gap: gap, cmd: l, line: i + 1}
		comments, gap = nil, false
		if i+1 >= len(lines) || lines[i+1] != "----" {
			t.Fatalf("%s:%d: command %q is not followed by ----", file, i+1, l)
		}
		i += 2
		var out []string
		for ; i < len(lines) && strings.TrimSpace(lines[i]) != ""; i++ {
			out = append(out, lines[i])
		}
		b.want = strings.Join(out, "\n")
		blocks = append(blocks, b)
	}
	return blocks, comments
}

func runScenarioFile(t *testing.T, file string) {
	blocks, trailer := parseScenario(t, file)
	r := newScenarioRunner(t)
	var rewritten strings.Builder
	for i, b := range blocks {
		got := r.run(b.cmd)
		if got == "" {
			got = "ok"
		}
		if !*update && got != b.want {
			t.Errorf("%s:%d: %s\ngot:\n%s\nwant:\n%s", file, b.line, b.cmd, indent(got), indent(b.want))
		}
		if i > 0 {
			rewritten.WriteString("\n")
		}
		for _, c := range b.comments {
			rewritten.WriteString(c + "\n")
		}
		if b.gap {
			rewritten.WriteString("\n")
		}
		fmt.Fprintf(&rewritten, "%s\n----\n%s\n", b.cmd, got)
	}
	for _, c := range trailer {
		rewritten.WriteString("\n" + c)
	}
	if *update {
		if err := os.WriteFile(file, []byte(rewritten.String()), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

func indent(s string) string { return "  " + strings.ReplaceAll(s, "\n", "\n  ") }

// scenarioRunner is one State, its clock and the names of its blobs.
type scenarioRunner struct {
	t     *testing.T
	s     *State
	cfg   Config
	now   time.Time
	blobs map[string]rafs.Digest // name -> digest
	names map[string]string      // digest string -> name
}

func newScenarioRunner(t *testing.T) *scenarioRunner {
	r := &scenarioRunner{t: t, now: t0, blobs: map[string]rafs.Digest{}, names: map[string]string{}}
	r.cfg = Default()
	r.cfg.Jitter = 0
	r.reset()
	return r
}

func (r *scenarioRunner) reset() {
	s, err := New(r.cfg, rand.NewPCG(1, 2))
	if err != nil {
		r.t.Fatalf("config: %v", err)
	}
	r.s = s
}

// blob names a blob digest after the scenario's name for it.
func (r *scenarioRunner) blob(name string) rafs.Digest {
	d, ok := r.blobs[name]
	if !ok {
		d = digest(name)
		r.blobs[name] = d
		r.names[d.String()] = name
	}
	return d
}

// since renders a time as the offset from the scenario's start.
func (r *scenarioRunner) since(at time.Time) string { return "+" + at.Sub(t0).String() }

// errString renders an error with blob digests replaced by their names.
func (r *scenarioRunner) errString(err error) string {
	msg := err.Error()
	for d, n := range r.names {
		msg = strings.ReplaceAll(msg, d, n)
	}
	return "error: " + msg
}

// scenarioArgs are a command's key=value arguments and bare flags.
type scenarioArgs struct {
	kv    map[string]string
	flags map[string]bool
	used  map[string]bool
}

func (a scenarioArgs) get(k string) (string, bool) {
	v, ok := a.kv[k]
	a.used[k] = true
	return v, ok
}

func (a scenarioArgs) flag(k string) bool {
	a.used[k] = true
	return a.flags[k]
}

// run executes one command line and returns its rendered result.
//
// Commands (every one acts at the scenario's current time):
//
//	config key=value...     a new State with Default() changed (jitter off):
//	                        max-peers, max-peers-per-source, max-parents,
//	                        origin-fetchers, origin-timeout, origin-turns-per-peer,
//	                        ban-quorum, ban-duration, peer-ttl, lease-timeout,
//	                        tree-max-children, tree-starve-after, refute-duration
//	tick d                  advance the clock by d (a Go duration)
//	join peer= machine= [host= rack= zone= capacity=]   Register
//	heartbeat peer= [uploads=]                           Heartbeat
//	leave peer=             Unregister
//	expire                  Expire: the peers dropped
//	announce peer= blob= chunks=      Announce: peers to wake
//	drop peer= blob= chunks=          Drop: peers to wake
//	abandon peer= blob= chunks=       AbandonOrigin: peers to wake
//	route peer= blob= chunks=         Parents: the answer
//	report peer= about= blob= [ok] [bytes= dur=] [bad=chunk] [missing=chunks]
//	ban peer= / unban peer=           the operator's Ban and Unban
//	peers / blobs / origin / bans     the admin views
//
// chunks are ordinals and ranges: 0-3,7.
func (r *scenarioRunner) run(line string) string {
	fields := strings.Fields(line)
	cmd := fields[0]
	a := scenarioArgs{kv: map[string]string{}, flags: map[string]bool{}, used: map[string]bool{}}
	var pos []string
	for _, f := range fields[1:] {
		if k, v, ok := strings.Cut(f, "="); ok {
			a.kv[k] = v
		} else {
			a.flags[f] = true
			pos = append(pos, f)
		}
	}
	out := r.exec(cmd, a, pos)
	for k := range a.kv {
		if !a.used[k] {
			r.t.Fatalf("%s: unknown argument %q", line, k)
		}
	}
	for k := range a.flags {
		if !a.used[k] {
			r.t.Fatalf("%s: unknown argument %q", line, k)
		}
	}
	return out
}

func (r *scenarioRunner) exec(cmd string, a scenarioArgs, pos []string) string {
	t := r.t
	peer := func() string {
		v, ok := a.get("peer")
		if !ok {
			t.Fatalf("%s: no peer=", cmd)
		}
		return v
	}
	blob := func() rafs.Digest {
		v, ok := a.get("blob")
		if !ok {
			t.Fatalf("%s: no blob=", cmd)
		}
		return r.blob(v)
	}
	chunks := func(key string) []uint32 {
		v, ok := a.get(key)
		if !ok {
			t.Fatalf("%s: no %s=", cmd, key)
		}
		return parseChunks(t, v)
	}
	switch cmd {
	case "config":
		for k, v := range a.kv {
			a.used[k] = true
			r.setConfig(k, v)
		}
		r.reset()
		return "ok"
	case "tick":
		if len(pos) != 1 {
			t.Fatalf("tick: want one duration")
		}
		a.used[pos[0]] = true
		d, err := time.ParseDuration(pos[0])
		if err != nil {
			t.Fatal(err)
		}
		r.now = r.now.Add(d)
		return "now " + r.since(r.now)
	case "join":
		id := peer()
		info := PeerInfo{Addrs: []string{"/ip4/10.0.0.1/tcp/4001/p2p/" + id}, Labels: map[string]string{}}
		if v, ok := a.get("machine"); ok {
			info.Source = v
		}
		for _, k := range []string{LabelHost, LabelRack, LabelZone} {
			if v, ok := a.get(k); ok {
				info.Labels[k] = v
			}
		}
		if v, ok := a.get("capacity"); ok {
			info.UploadCapacity = parseInt(t, v)
		}
		if err := r.s.Register(id, info, r.now); err != nil {
			return r.errString(err)
		}
		return "ok"
	case "heartbeat":
		var load Load
		if v, ok := a.get("uploads"); ok {
			load.ActiveUploads = int(parseInt(t, v))
		}
		if err := r.s.Heartbeat(peer(), load, r.now); err != nil {
			return r.errString(err)
		}
		return "ok"
	case "leave":
		r.s.Unregister(peer())
		return "ok"
	case "expire":
		return "gone: " + list(r.s.Expire(r.now))
	case "announce", "drop", "abandon":
		id, d, cs := peer(), blob(), chunks("chunks")
		var wake []string
		var err error
		switch cmd {
		case "announce":
			wake, err = r.s.Announce(id, d, cs, r.now)
		case "drop":
			wake, err = r.s.Drop(id, d, cs, r.now)
		default:
			wake, err = r.s.AbandonOrigin(id, d, cs, r.now)
		}
		if err != nil {
			return r.errString(err)
		}
		if len(wake) > 0 {
			return "ok, wake " + list(wake)
		}
		return "ok"
	case "route":
		ans, err := r.s.Parents(peer(), blob(), chunks("chunks"), r.now)
		if err != nil {
			return r.errString(err)
		}
		return renderAnswer(ans)
	case "report":
		id := peer()
		about, ok := a.get("about")
		if !ok {
			t.Fatalf("report: no about=")
		}
		o := Outcome{Blob: blob(), OK: a.flag("ok")}
		if v, ok := a.get("bytes"); ok {
			o.Bytes = parseInt(t, v)
		}
		if v, ok := a.get("dur"); ok {
			d, err := time.ParseDuration(v)
			if err != nil {
				t.Fatal(err)
			}
			o.Duration = d
		}
		if v, ok := a.get("bad"); ok {
			o.BadBytes, o.BadChunk = true, uint32(parseInt(t, v))
		}
		if _, ok := a.kv["missing"]; ok {
			o.Missing = chunks("missing")
		}
		banned, err := r.s.Report(id, about, o, r.now)
		switch {
		case err != nil:
			return r.errString(err)
		case banned:
			return "ok, " + about + " banned"
		}
		return "ok"
	case "ban":
		r.s.Ban(peer(), r.now)
		return "ok"
	case "unban":
		r.s.Unban(peer())
		return "ok"
	case "peers":
		return r.renderPeers()
	case "blobs":
		var out []string
		for _, v := range r.s.Blobs() {
			out = append(out, fmt.Sprintf("%s: holders %d, chunks %d, copies %d, origin fetches %d, waiters %d",
				r.names[v.Blob.String()], v.Holders, v.Chunks, v.Copies, v.OriginFetch, v.OriginWaiter))
		}
		return orNone(out)
	case "origin":
		var out []string
		for _, v := range r.s.OriginFetches(r.now) {
			var fs []string
			for _, f := range v.Fetchers {
				fs = append(fs, fmt.Sprintf("%s until %s", f.Peer, r.since(f.Deadline)))
			}
			out = append(out, fmt.Sprintf("%s chunk %d: fetchers %s; waiters %s",
				r.names[v.Blob.String()], v.Chunk, strings.Join(fs, ", "), list(v.Waiters)))
		}
		return orNone(out)
	case "bans":
		var out []string
		for _, v := range r.s.Bans(r.now) {
			out = append(out, fmt.Sprintf("%s: %s to %s, accused by %s", v.Peer, r.since(v.Since), r.since(v.Until), list(v.Accusers)))
		}
		return orNone(out)
	}
	t.Fatalf("unknown command %q", cmd)
	return ""
}

func (r *scenarioRunner) renderPeers() string {
	var out []string
	for _, v := range r.s.Peers(r.now) {
		l := fmt.Sprintf("%s: machine %s", v.ID, orDash(v.Source))
		if !v.Alive {
			l += ", expired"
		}
		l += fmt.Sprintf(", blobs %d, chunks %d, pending %d, origin turns %d, reports %d, success %.2f",
			v.Blobs, v.Chunks, v.Pending, v.OriginTurns, v.Reports, v.Success)
		if !v.BannedUntil.IsZero() {
			l += ", banned until " + r.since(v.BannedUntil)
		}
		out = append(out, l)
	}
	return orNone(out)
}

func (r *scenarioRunner) setConfig(k, v string) {
	t := r.t
	dur := func() time.Duration {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("config %s: %v", k, err)
		}
		return d
	}
	n := func() int { return int(parseInt(t, v)) }
	c := &r.cfg
	switch k {
	case "max-peers":
		c.MaxPeers = n()
	case "max-peers-per-source":
		c.MaxPeersPerSource = n()
	case "max-parents":
		c.MaxParents = n()
	case "origin-fetchers":
		c.OriginFetchers = n()
	case "origin-timeout":
		c.OriginTimeout = dur()
	case "origin-turns-per-peer":
		c.OriginTurnsPerPeer = n()
	case "ban-quorum":
		c.BanQuorum = n()
	case "ban-duration":
		c.BanDuration = dur()
	case "peer-ttl":
		c.PeerTTL = dur()
	case "lease-timeout":
		c.LeaseTimeout = dur()
	case "tree-max-children":
		c.TreeMaxChildren = n()
	case "tree-starve-after":
		c.TreeStarveAfter = dur()
	case "refute-duration":
		c.RefuteDuration = dur()
	default:
		t.Fatalf("config: unknown key %q", k)
	}
}

// renderAnswer lists an answer's parts in its own order: parents best
// first, then origin, then waits.
func renderAnswer(a Answer) string {
	var out []string
	for _, p := range a.Parents {
		out = append(out, fmt.Sprintf("parent %s: %s", p.ID, ranges(p.Chunks)))
	}
	if len(a.Origin) > 0 {
		out = append(out, "origin: "+ranges(a.Origin))
	}
	for _, w := range a.Wait {
		who := "more parents"
		if len(w.Fetchers) > 0 {
			who = strings.Join(w.Fetchers, ", ")
		}
		out = append(out, fmt.Sprintf("wait: %s for %s, retry after %s", ranges(w.Chunks), who, w.RetryAfter))
	}
	return orNone(out)
}

// ranges renders ascending ordinals as runs: 0-3,7.
func ranges(cs []uint32) string {
	var parts []string
	for i := 0; i < len(cs); {
		j := i
		for j+1 < len(cs) && cs[j+1] == cs[j]+1 {
			j++
		}
		if j == i {
			parts = append(parts, strconv.FormatUint(uint64(cs[i]), 10))
		} else {
			parts = append(parts, fmt.Sprintf("%d-%d", cs[i], cs[j]))
		}
		i = j + 1
	}
	return strings.Join(parts, ",")
}

func parseChunks(t *testing.T, s string) []uint32 {
	var out []uint32
	for _, part := range strings.Split(s, ",") {
		lo, hi, isRange := strings.Cut(part, "-")
		a := uint32(parseInt(t, lo))
		b := a
		if isRange {
			b = uint32(parseInt(t, hi))
		}
		for c := a; c <= b; c++ {
			out = append(out, c)
		}
	}
	return out
}

func parseInt(t *testing.T, s string) int64 {
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		t.Fatalf("number %q: %v", s, err)
	}
	return n
}

func list(ids []string) string {
	if len(ids) == 0 {
		return "none"
	}
	return strings.Join(slices.Sorted(slices.Values(ids)), " ")
}

func orNone(lines []string) string {
	if len(lines) == 0 {
		return "none"
	}
	return strings.Join(lines, "\n")
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// TestScenarioRanges pins the runner's own rendering of chunk lists.
func TestScenarioRanges(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want string
	}{
		{"0", "0"}, {"0-3", "0-3"}, {"0-3,5", "0-3,5"}, {"1,3,5-6,7", "1,3,5-7"},
	} {
		if got := ranges(parseChunks(t, tt.in)); got != tt.want {
			t.Errorf("ranges(%s) = %s, want %s", tt.in, got, tt.want)
		}
	}
}
