package configs

import (
	"bytes"
	"damselfly/peer/daemon"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/pelletier/go-toml/v2"
	"gopkg.in/yaml.v3"
)

// The deployment files are documentation that must stay well-formed:
// every Kubernetes manifest parses as YAML with kind and metadata, the
// containerd file as TOML with a mirror host, and each systemd unit has
// its sections and an ExecStart of the damselfly binary.
func TestDeploymentFilesParse(t *testing.T) {
	k8s, _ := filepath.Glob("kubernetes/*.yaml")
	if len(k8s) == 0 {
		t.Fatal("no Kubernetes manifests")
	}
	for _, f := range k8s {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for n := 0; ; n++ {
			var doc struct {
				APIVersion string         `yaml:"apiVersion"`
				Kind       string         `yaml:"kind"`
				Metadata   map[string]any `yaml:"metadata"`
			}
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s document %d: %v", f, n, err)
			}
			if doc.APIVersion == "" || doc.Kind == "" || doc.Metadata["name"] == nil {
				t.Errorf("%s document %d: missing apiVersion, kind or metadata.name", f, n)
			}
		}
	}

	data, err := os.ReadFile("containerd/hosts.toml")
	if err != nil {
		t.Fatal(err)
	}
	var hosts struct {
		Server string                    `toml:"server"`
		Host   map[string]map[string]any `toml:"host"`
	}
	if err := toml.Unmarshal(data, &hosts); err != nil {
		t.Fatalf("containerd/hosts.toml: %v", err)
	}
	if hosts.Server == "" || hosts.Host["http://127.0.0.1:7950"] == nil {
		t.Errorf("containerd/hosts.toml: got server %q, hosts %v; want a server and the peer's mirror", hosts.Server, hosts.Host)
	}

	data, err = os.ReadFile("containerd/config.toml")
	if err != nil {
		t.Fatal(err)
	}
	var ctrd struct {
		Version      int `toml:"version"`
		ProxyPlugins map[string]struct {
			Type    string `toml:"type"`
			Address string `toml:"address"`
		} `toml:"proxy_plugins"`
		Plugins map[string]map[string]any `toml:"plugins"`
	}
	if err := toml.Unmarshal(data, &ctrd); err != nil {
		t.Fatalf("containerd/config.toml: %v", err)
	}
	sn := ctrd.ProxyPlugins["damselfly"]
	if ctrd.Version != 2 || sn.Type != "snapshot" || sn.Address != "/run/damselfly/snapshotter.sock" {
		t.Errorf("containerd/config.toml: got version %d, proxy plugin %+v; want version 2 and the snapshotter's default address", ctrd.Version, sn)
	}
	cri, _ := ctrd.Plugins["io.containerd.grpc.v1.cri"]["containerd"].(map[string]any)
	if cri["snapshotter"] != "damselfly" || cri["disable_snapshot_annotations"] != false {
		t.Errorf("containerd/config.toml: CRI settings %v, want snapshotter damselfly and disable_snapshot_annotations false", cri)
	}

	units, _ := filepath.Glob("systemd/*.service")
	if len(units) < 3 {
		t.Fatalf("got %d systemd units, want the peer, scheduler and mount units", len(units))
	}
	for _, f := range units {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		s := string(data)
		for _, want := range []string{"[Unit]", "[Service]", "[Install]", "ExecStart=/usr/local/bin/damselfly "} {
			if !strings.Contains(s, want) {
				t.Errorf("%s: no %q", f, want)
			}
		}
	}
}

// unitSettings returns the Key=Value lines of a systemd unit's [Service]
// section.
func unitSettings(t *testing.T, file string) map[string]string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	section := ""
	for _, line := range strings.Split(string(data), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case line == "" || strings.HasPrefix(line, "#"):
		case strings.HasPrefix(line, "["):
			section = line
		case section == "[Service]":
			if k, v, ok := strings.Cut(line, "="); ok {
				out[k] = v
			}
		}
	}
	return out
}

// memBytes parses a systemd (512M, 1G) or Kubernetes (512Mi, 1Gi) memory
// size; both mean powers of 1024 with these suffixes.
func memBytes(s string) (int64, bool) {
	s = strings.TrimSuffix(s, "i")
	mult := int64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseInt(s, 10, 64)
	return v * mult, err == nil && v > 0
}

// Every daemon's unit bounds its memory: MemoryHigh (the kernel
// reclaims and throttles above it) below MemoryMax (it is killed above
// it), and the peer's MemoryMax equals the DaemonSet's memory limit, so
// the two deployments size the peer alike.
func TestUnitsBoundMemory(t *testing.T) {
	units, _ := filepath.Glob("systemd/*.service")
	if len(units) < 3 {
		t.Fatalf("got %d systemd units, want the peer, scheduler and mount units", len(units))
	}
	for _, f := range units {
		s := unitSettings(t, f)
		high, okHigh := memBytes(s["MemoryHigh"])
		most, okMax := memBytes(s["MemoryMax"])
		if !okHigh || !okMax {
			t.Errorf("%s: got MemoryHigh=%q MemoryMax=%q, want both as sizes", f, s["MemoryHigh"], s["MemoryMax"])
			continue
		}
		if high >= most {
			t.Errorf("%s: MemoryHigh %s is not below MemoryMax %s", f, s["MemoryHigh"], s["MemoryMax"])
		}
	}
	peerMax, _ := memBytes(unitSettings(t, "systemd/damselfly-peer.service")["MemoryMax"])
	peer := peerContainer(t, daemonSet(t))
	if limit, ok := memBytes(peer.Resources.Limits["memory"]); !ok || limit != peerMax {
		t.Errorf("peer: the DaemonSet's memory limit %q is not the unit's MemoryMax (%d bytes)", peer.Resources.Limits["memory"], peerMax)
	}
}

// k8sVolume is the part of a pod volume these tests read.
type k8sVolume struct {
	Name     string `yaml:"name"`
	HostPath *struct {
		Path string `yaml:"path"`
		Type string `yaml:"type"`
	} `yaml:"hostPath"`
}

// k8sContainer is the part of a container these tests read.
type k8sContainer struct {
	Name         string   `yaml:"name"`
	Args         []string `yaml:"args"`
	VolumeMounts []struct {
		Name      string `yaml:"name"`
		MountPath string `yaml:"mountPath"`
	} `yaml:"volumeMounts"`
	Resources struct {
		Limits map[string]string `yaml:"limits"`
	} `yaml:"resources"`
}

type k8sDaemonSet struct {
	Spec struct {
		Template struct {
			Spec struct {
				Containers []k8sContainer `yaml:"containers"`
				Volumes    []k8sVolume    `yaml:"volumes"`
			} `yaml:"spec"`
		} `yaml:"template"`
	} `yaml:"spec"`
}

func daemonSet(t *testing.T) k8sDaemonSet {
	t.Helper()
	data, err := os.ReadFile("kubernetes/peer-daemonset.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var ds k8sDaemonSet
	if err := yaml.Unmarshal(data, &ds); err != nil {
		t.Fatal(err)
	}
	return ds
}

func peerContainer(t *testing.T, ds k8sDaemonSet) k8sContainer {
	t.Helper()
	for _, c := range ds.Spec.Template.Spec.Containers {
		if c.Name == "peer" {
			return c
		}
	}
	t.Fatal("the DaemonSet has no container named peer")
	return k8sContainer{}
}

// sampleCacheDir returns cache.dir of a sample configuration.
func sampleCacheDir(t *testing.T, file string) string {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var cfg struct {
		Cache struct {
			Dir string `yaml:"dir"`
		} `yaml:"cache"`
	}
	if err := yaml.Unmarshal(data, &cfg); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	return cfg.Cache.Dir
}

// The DaemonSet keeps the node cache on the node, as its comment says: the
// peer container mounts a hostPath volume at the cache.dir of peer.yaml,
// (its default with the default state dir), which is the path on the
// node too and mount.yaml's cache.dir, so that
// the node's mount daemons share the peer's one copy of each chunk.
// Without it the cache lived in the container, gone with every restart
// and invisible to the mounts.
func TestDaemonSetSharesNodeCache(t *testing.T) {
	ds := daemonSet(t)
	if slices.Contains(peerContainer(t, ds).Args, "--dir") {
		t.Fatal("the DaemonSet gives the peer --dir: its cache would move with it")
	}
	pcfg, err := Load("peer.yaml", "peer", daemon.Default())
	if err != nil {
		t.Fatal(err)
	}
	dir := pcfg.CacheDir()
	if dir == "" || dir != sampleCacheDir(t, "mount.yaml") {
		t.Fatalf("cache dir: peer.yaml's %q, mount.yaml's %q; want one path", dir, sampleCacheDir(t, "mount.yaml"))
	}
	vol := ""
	for _, m := range peerContainer(t, ds).VolumeMounts {
		if m.MountPath == dir {
			vol = m.Name
		}
	}
	if vol == "" {
		t.Fatalf("the peer container mounts nothing at %s", dir)
	}
	for _, v := range ds.Spec.Template.Spec.Volumes {
		if v.Name != vol {
			continue
		}
		if v.HostPath == nil || v.HostPath.Path != dir || v.HostPath.Type != "DirectoryOrCreate" {
			t.Fatalf("volume %s: got %+v, want hostPath %s, DirectoryOrCreate", vol, v.HostPath, dir)
		}
		return
	}
	t.Fatalf("no volume %s in the DaemonSet", vol)
}
