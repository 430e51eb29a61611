package configs

import (
	"bytes"
	schedd "damselfly/scheduler/daemon"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/fusemount"
	"damselfly/peer/daemon"

	"github.com/spf13/pflag"
)

func TestLoadMountSample(t *testing.T) {
	cfg, err := Load("mount.yaml", "mount", fusemount.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatalf("sample config does not validate: %v", err)
	}
	if cfg.Backend.Proxy.URL != "http://127.0.0.1:7950" || cfg.Backend.Deadline != 3*time.Minute || cfg.AmplifyIO != 1<<20 {
		t.Errorf("got proxy %q deadline %v amplify %d", cfg.Backend.Proxy.URL, cfg.Backend.Deadline, cfg.AmplifyIO)
	}
}

func TestLoadEnvOverridesFile(t *testing.T) {
	t.Setenv("DAMSELFLY_BACKEND_PROXY_URL", "http://127.0.0.1:9")
	t.Setenv("DAMSELFLY_CACHE_CAPACITY", "12345")
	cfg, err := Load("mount.yaml", "mount", fusemount.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Backend.Proxy.URL != "http://127.0.0.1:9" || cfg.Cache.Capacity != 12345 {
		t.Errorf("got proxy %q capacity %d, want the environment's", cfg.Backend.Proxy.URL, cfg.Cache.Capacity)
	}
}

func TestLoadRejectsUnknownKeys(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("backend:\n  proxxy:\n    url: x\n"), 0o644)
	_, err := Load(p, "mount", fusemount.DefaultConfig())
	if err == nil || !strings.Contains(err.Error(), "proxxy") {
		t.Fatalf("got %v, want an error naming the unknown key", err)
	}
}

func TestInvalidConfigListsEveryProblem(t *testing.T) {
	p := filepath.Join(t.TempDir(), "bad.yaml")
	os.WriteFile(p, []byte("advanced:\n  amplify_io: 1\n  prefetch:\n    threads: 0\ncache:\n  capacity: -1\n"), 0o644)
	cfg, err := Load(p, "mount", fusemount.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = Validate(cfg)
	for _, want := range []string{"advanced.amplify_io:", "advanced.prefetch.threads:", "cache.capacity:"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want a problem named %s", err, want)
		}
	}
}

// Keys of older files that moved under advanced: or were renamed are
// refused with their new names, all at once, never ignored.
func TestLoadNamesMovedKeys(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		command, file string
		def           any
		want          []string
	}{
		{"peer", "node:\n  fetch_deadline: 1m\nupstream:\n  default_registry: https://r.example\n  timeout: 5s\nscheduler:\n  route_timeout: 1s\n  labels: {zone: a}\ncache:\n  high_watermark: 0.9\n", daemon.Default(), []string{
			"key node.fetch_deadline is advanced.node.fetch_deadline now",
			"key upstream.default_registry was renamed: it is registry.default_registry now",
			"key upstream.timeout is advanced.registry.timeout now",
			"key scheduler.route_timeout was renamed: it is advanced.node.route_timeout now",
			"key scheduler.labels.zone was renamed: it is labels.zone now",
			"key cache.high_watermark is advanced.cache.high_watermark now",
		}},
		{"scheduler", "state:\n  peer_ttl: 5s\nadmin:\n  allow_non_loopback: true\nexpire_interval: 1s\n", schedd.Default("/d"), []string{
			"key state.peer_ttl is advanced.state.peer_ttl now",
			"key admin.allow_non_loopback was renamed: it is admin.allow_remote now",
			"key expire_interval is advanced.expire_interval now",
		}},
		{"mount", "amplify_io: 1048576\nbackend:\n  deadline: 1m\n  proxy:\n    ping_url: http://127.0.0.1:7950/healthz\nadvanced:\n  memory_bytes: 1\n", fusemount.DefaultConfig(), []string{
			"key amplify_io is advanced.amplify_io now",
			"key backend.deadline is advanced.backend.deadline now",
			"key backend.proxy.ping_url is advanced.backend.proxy.ping_url now",
			"key advanced.memory_bytes is not a tunable: set memory_bytes",
		}},
	} {
		t.Run(tt.command, func(t *testing.T) {
			p := filepath.Join(t.TempDir(), "old.yaml")
			os.WriteFile(p, []byte(tt.file), 0o644)
			var err error
			switch def := tt.def.(type) {
			case daemon.Config:
				_, err = Load(p, tt.command, def)
			case schedd.Config:
				_, err = Load(p, tt.command, def)
			case fusemount.Config:
				_, err = Load(p, tt.command, def)
			}
			for _, w := range tt.want {
				if err == nil || !strings.Contains(err.Error(), w) {
					t.Errorf("got %v, want %q", err, w)
				}
			}
		})
	}
}

func TestLoadRefusesOldEnvironment(t *testing.T) {
	t.Setenv("DAMSELFLY_NODE_HEDGE_DELAY", "2s")
	_, err := Load("", "peer", daemon.Default())
	if err == nil || !strings.Contains(err.Error(), "DAMSELFLY_ADVANCED_NODE_HEDGE_DELAY") {
		t.Fatalf("got %v, want the variable's new name", err)
	}
}

func TestLoadAdvancedFromEnvironment(t *testing.T) {
	t.Setenv("DAMSELFLY_ADVANCED_NODE_HEDGE_DELAY", "3s")
	t.Setenv("DAMSELFLY_REGISTRY_DEFAULT_REGISTRY", "https://r.example")
	cfg, err := Load("", "peer", daemon.Default())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Node.HedgeDelay != 3*time.Second || cfg.Upstream.DefaultRegistry != "https://r.example" {
		t.Errorf("got hedge delay %v, registry %q; want the environment's", cfg.Node.HedgeDelay, cfg.Upstream.DefaultRegistry)
	}
}

// A file may wrap its keys in one section named after the command, as
// the README says.
func TestLoadWrappedInCommand(t *testing.T) {
	t.Parallel()
	p := filepath.Join(t.TempDir(), "peer.yaml")
	os.WriteFile(p, []byte("peer:\n  dir: /srv/peer\n  advanced:\n    node:\n      hedge_delay: 5s\n"), 0o644)
	cfg, err := Load(p, "peer", daemon.Default())
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Dir != "/srv/peer" || cfg.Node.HedgeDelay != 5*time.Second {
		t.Errorf("got dir %q, hedge delay %v; want the wrapped file's", cfg.Dir, cfg.Node.HedgeDelay)
	}
	os.WriteFile(p, []byte("scheduler:\n  admin:\n    listen: 127.0.0.1:1\n"), 0o644)
	if _, err := Load(p, "peer", daemon.Default()); err == nil {
		t.Error("a file wrapped in another command's name loaded")
	}
}

// What --print-config prints loads back to the same configuration, for
// every daemon, and keeps the tunables under advanced:.
func TestPrintLoadsBack(t *testing.T) {
	t.Parallel()
	check := func(t *testing.T, command string, def, got any, printed string) {
		t.Helper()
		// Printed again, the loaded config is the same text: every key
		// and value came back (an empty list may load as [] for nil).
		var again bytes.Buffer
		if err := Print(&again, got); err != nil {
			t.Fatal(err)
		}
		if again.String() != printed {
			t.Errorf("%s: printed, loaded and printed again:\n%s\nwant\n%s", command, again.String(), printed)
		}
		if !strings.Contains(printed, "\nadvanced:\n") {
			t.Errorf("%s: no advanced: section in\n%s", command, printed)
		}
	}
	dir := t.TempDir()
	print := func(t *testing.T, name string, cfg any) string {
		t.Helper()
		var b bytes.Buffer
		if err := Print(&b, cfg); err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, name+".yaml")
		os.WriteFile(p, b.Bytes(), 0o644)
		return p
	}
	pd := daemon.Default()
	pd.Labels = map[string]string{"zone": "a"}
	pd.Scheduler.Schedulers = []string{"/ip4/127.0.0.1/tcp/7945/p2p/12D3KooWJWoaqZhDaoEFshF7Rh1bpY9ohihFhzcW6d69Lr2NASuq"}
	p := print(t, "peer", pd)
	got, err := Load(p, "peer", daemon.Default())
	if err != nil {
		t.Fatal(err)
	}
	b, _ := os.ReadFile(p)
	check(t, "peer", pd, got, string(b))

	sd := schedd.Default("/d")
	p = print(t, "scheduler", sd)
	sgot, err := Load(p, "scheduler", schedd.Default("/other"))
	if err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(p)
	check(t, "scheduler", sd, sgot, string(b))

	md := fusemount.DefaultConfig()
	p = print(t, "mount", md)
	mgot, err := Load(p, "mount", fusemount.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	b, _ = os.ReadFile(p)
	check(t, "mount", md, mgot, string(b))
}

func readFile(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// TestLoaderFileShapes: a flag command's file may hold its keys at the
// top level, as the daemons' files do, or under the command's name; the
// environment wins over the file.
func TestLoaderFileShapes(t *testing.T) {
	dir := t.TempDir()
	top := filepath.Join(dir, "top.yaml")
	wrapped := filepath.Join(dir, "wrapped.yaml")
	os.WriteFile(top, []byte("chunk_size: 4194304\nlevel: 3\n"), 0o600)
	os.WriteFile(wrapped, []byte("convert:\n  chunk_size: 2097152\n"), 0o600)
	for file, want := range map[string]int{top: 4194304, wrapped: 2097152} {
		l, err := New(file, "convert")
		if err != nil {
			t.Fatal(err)
		}
		if got := l.Int("chunk-size"); got != want {
			t.Errorf("%s: chunk_size %d, want %d", filepath.Base(file), got, want)
		}
	}
	t.Setenv("DAMSELFLY_CONVERT_LEVEL", "4")
	l, err := New(top, "convert")
	if err != nil {
		t.Fatal(err)
	}
	fs := pflag.NewFlagSet("convert", pflag.ContinueOnError)
	fs.Int("level", 1, "")
	if err := l.BindFlags(fs); err != nil {
		t.Fatal(err)
	}
	if got := l.Int("level"); got != 4 {
		t.Errorf("level %d with the environment saying 4 over the file's 3", got)
	}
	var out strings.Builder
	if err := l.PrintSettings(&out); err != nil || !strings.Contains(out.String(), "chunk_size: 4194304") {
		t.Errorf("PrintSettings: %q, %v", out.String(), err)
	}
}
