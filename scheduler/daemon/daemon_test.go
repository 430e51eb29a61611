package daemon

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := Default("/var/lib/damselfly/scheduler").Validate(); err != nil {
		t.Fatalf("default config: %v", err)
	}
	bad := Default("/x")
	bad.Host.ListenAddrs = nil
	bad.ExpireInterval = 0
	err := bad.Validate()
	for _, want := range []string{"host.listen_addrs", "expire_interval"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("error %v does not name %s", err, want)
		}
	}
}

// New builds the host and the server on it: the server answers on the
// host's addresses and closes the host when it stops.
func TestNewServesOnTheHost(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	cfg := Default(dir)
	cfg.Host.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	cfg.Host.ClusterKeyFile = ""
	cfg.Host.InsecureOpenCluster = true
	cfg.Admin.Listen = "127.0.0.1:0"
	s, err := New(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if ai := s.AddrInfo(); len(ai.Addrs) == 0 || ai.ID == "" {
		t.Errorf("AddrInfo %v: want the host's ID and addresses", ai)
	}
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- s.Run(ctx) }()
	rafstest.Eventually(t, 10*time.Second, "the identity file", func() bool {
		_, err := os.Stat(filepath.Join(dir, "identity.key"))
		return err == nil
	})
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run: %v", err)
	}
	bad := cfg
	bad.Host.ListenAddrs = nil
	if _, err := New(bad, nil); err == nil || !strings.Contains(err.Error(), "host.listen_addrs") {
		t.Errorf("New with a bad host config: got %v, want an error naming host.listen_addrs", err)
	}
}
