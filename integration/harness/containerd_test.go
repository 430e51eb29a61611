package harness

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/pelletier/go-toml/v2"

	"damselfly/rafs/rafstest"
)

// TestStartContainerd starts a real containerd, reaches it with a
// client and stops it.
func TestStartContainerd(t *testing.T) {
	rafstest.RequireRoot(t)
	rafstest.RequireTool(t, "containerd")
	dir := t.TempDir()
	c, err := StartContainerd(t.Context(), ContainerdConfig{Name: "containerd", Dir: dir})
	if err != nil {
		t.Fatal(err)
	}
	cl, err := c.Client(t.Context())
	if err != nil {
		t.Errorf("Client: got %v, want a client", err)
	} else {
		cl.Close()
	}
	if err := c.Stop(); err != nil {
		t.Errorf("Stop: got %v, want nil", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "containerd.toml")); err != nil {
		t.Errorf("config file: %v", err)
	}
	if c.Socket() != filepath.Join(dir, "containerd.sock") {
		t.Errorf("Socket: got %q, want %q", c.Socket(), filepath.Join(dir, "containerd.sock"))
	}
	// A containerd that exits at once (config.toml does not parse) is an
	// error, not a wait for the timeout.
	start := time.Now()
	if _, err := StartContainerd(t.Context(), ContainerdConfig{Name: "broken", Dir: t.TempDir(), Extra: "[not toml"}); err == nil {
		t.Errorf("StartContainerd with a broken config.toml: got nil error")
	} else if d := time.Since(start); d > containerdReadyTimeout/2 {
		t.Errorf("StartContainerd with a broken config.toml took %v: %v", d, err)
	} else {
		t.Logf("broken config.toml: %v", err)
	}
}

// TestContainerdConfigTOML parses the config.toml StartContainerd
// writes and checks what each option turns on or off.
func TestContainerdConfigTOML(t *testing.T) {
	t.Parallel()
	const cri = "io.containerd.grpc.v1.cri"
	for _, tc := range []struct {
		name string
		cfg  ContainerdConfig
	}{
		{"plain", ContainerdConfig{Name: "c", Dir: "/d"}},
		{"proxy", ContainerdConfig{Name: "c", Dir: "/d", Snapshotters: map[string]string{"damselfly": "/s/sn.sock", "other": "/s/o.sock"},
			Extra: "\n[plugins.\"io.containerd.gc.v1.scheduler\"]\n  deletion_threshold = 1\n"}},
		{"cri", ContainerdConfig{Name: "c", Dir: "/d", Socket: "/x/c.sock", CRI: true, CRISnapshotter: "damselfly",
			Snapshotters: map[string]string{"damselfly": "/s/sn.sock"}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			cfg := tc.cfg
			if cfg.Socket == "" {
				cfg.Socket = "/d/containerd.sock"
			}
			var got struct {
				Version  int                       `toml:"version"`
				Root     string                    `toml:"root"`
				State    string                    `toml:"state"`
				Disabled []string                  `toml:"disabled_plugins"`
				GRPC     struct{ Address string }  `toml:"grpc"`
				TTRPC    struct{ Address string }  `toml:"ttrpc"`
				Proxy    map[string]map[string]any `toml:"proxy_plugins"`
				Plugins  map[string]map[string]any `toml:"plugins"`
			}
			if err := toml.Unmarshal([]byte(cfg.toml()), &got); err != nil {
				t.Fatalf("config.toml does not parse: %v\n%s", err, cfg.toml())
			}
			if got.Version != 2 || got.Root != "/d/root" || got.State != "/d/state" {
				t.Errorf("version, root, state: got %d, %q, %q; want 2, /d/root, /d/state", got.Version, got.Root, got.State)
			}
			if got.GRPC.Address != cfg.Socket || got.TTRPC.Address != cfg.Socket+".ttrpc" {
				t.Errorf("sockets: got %q, %q; want %q and .ttrpc", got.GRPC.Address, got.TTRPC.Address, cfg.Socket)
			}
			if slices.Contains(got.Disabled, cri) == cfg.CRI {
				t.Errorf("CRI %v: got disabled_plugins %v", cfg.CRI, got.Disabled)
			}
			if len(got.Proxy) != len(cfg.Snapshotters) {
				t.Errorf("got %d proxy plugins, want %d", len(got.Proxy), len(cfg.Snapshotters))
			}
			for name, sock := range cfg.Snapshotters {
				if p := got.Proxy[name]; p["type"] != "snapshot" || p["address"] != sock {
					t.Errorf("proxy plugin %s: got %v, want a snapshotter at %s", name, p, sock)
				}
			}
			if c, ok := got.Plugins[cri]; ok != cfg.CRI {
				t.Errorf("CRI %v: got its table %v", cfg.CRI, c)
			} else if ok {
				ctrd, _ := c["containerd"].(map[string]any)
				if ctrd["snapshotter"] != cfg.CRISnapshotter || ctrd["disable_snapshot_annotations"] != false {
					t.Errorf("CRI containerd table: got %v, want snapshotter %q with annotations", ctrd, cfg.CRISnapshotter)
				}
			}
			if _, ok := got.Plugins["io.containerd.gc.v1.scheduler"]; ok != (cfg.Extra != "") {
				t.Errorf("Extra %q: got plugins %v", cfg.Extra, got.Plugins)
			}
		})
	}
}

func TestContainerdConfigValidate(t *testing.T) {
	t.Parallel()
	if err := (ContainerdConfig{Name: "c", Dir: "/d"}).Validate(); err != nil {
		t.Errorf("a minimal config: got %v, want nil", err)
	}
	err := ContainerdConfig{CRISnapshotter: "damselfly", Snapshotters: map[string]string{"x": ""}}.Validate()
	for _, want := range []string{"Name", "Dir", "CRISnapshotter", "Snapshotters"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("got %v, want an error naming %s", err, want)
		}
	}
}
