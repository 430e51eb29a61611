package preheat

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

func TestFileKeychain(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "config.json")
	// "dXNlcjpwYXNz" is base64 of user:pass.
	if err := os.WriteFile(p, []byte(`{"auths": {"reg.example:5000": {"auth": "dXNlcjpwYXNz"}, "https://index.docker.io/v1/": {"username": "hub", "password": "pw"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	resolve := func(k fileKeychain, reg string) *authn.AuthConfig {
		t.Helper()
		r, err := name.NewRegistry(reg)
		if err != nil {
			t.Fatal(err)
		}
		a, err := k.Resolve(r)
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	k := fileKeychain{path: p}
	if got := resolve(k, "reg.example:5000"); got.Username != "user" || got.Password != "pass" {
		t.Errorf("reg.example:5000: got %+v, want user:pass", got)
	}
	if got := resolve(k, "docker.io"); got.Username != "hub" {
		t.Errorf("docker.io: got %+v, want hub", got)
	}
	if got := resolve(k, "other.example"); *got != (authn.AuthConfig{}) {
		t.Errorf("other.example: got %+v, want anonymous", got)
	}
	if got := resolve(fileKeychain{path: filepath.Join(dir, "missing.json")}, "reg.example:5000"); *got != (authn.AuthConfig{}) {
		t.Errorf("missing file: got %+v, want anonymous", got)
	}
	if err := os.WriteFile(p, []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	r, _ := name.NewRegistry("reg.example:5000")
	if _, err := k.Resolve(r); err == nil {
		t.Error("a corrupt docker config resolved")
	}
}
