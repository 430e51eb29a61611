package configs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/fusemount"
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
	os.WriteFile(p, []byte("amplify_io: 1\nprefetch:\n  threads: 0\n"), 0o644)
	cfg, err := Load(p, "mount", fusemount.DefaultConfig())
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil || !strings.Contains(err.Error(), "amplify_io") || !strings.Contains(err.Error(), "prefetch.threads") {
		t.Fatalf("got %v, want both problems named", err)
	}
}
