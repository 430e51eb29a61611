package configs

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
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
