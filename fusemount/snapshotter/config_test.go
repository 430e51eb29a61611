package snapshotter

import (
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	if err := Default().Validate(); err != nil {
		t.Fatalf("defaults: %v", err)
	}
	c := Default()
	c.Root = "relative"
	c.Address = "/" + strings.Repeat("s", 200)
	c.Mount.Peer = "ftp://peer"
	c.Mount.Config = "mount.yaml"
	c.MountTimeout = 0
	c.CheckInterval = -1
	c.MaxBootstrapBytes = 1
	err := c.Validate()
	for _, field := range []string{"root:", "address:", "mount.peer:", "mount.config:", "mount_timeout:", "check_interval:", "max_bootstrap_bytes:"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("got %v, want a problem with %s", err, field)
		}
	}
	c = Default()
	c.Root = "/" + strings.Repeat("r", 90)
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "too long") {
		t.Errorf("a root whose daemon sockets would not fit: got %v, want an error", err)
	}
	c = Default()
	c.CRI.Listen = "cri.sock"
	c.CRI.ImageService = "/" + strings.Repeat("c", 200)
	err = c.Validate()
	for _, field := range []string{"cri.listen:", "cri.image_service:"} {
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("got %v, want a problem with %s", err, field)
		}
	}
	c = Default()
	c.CRI.Listen = c.Address
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "cri.listen:") {
		t.Errorf("cri.listen on the snapshotter's own socket: got %v, want an error", err)
	}
	c.CRI.Listen = "/run/damselfly/cri.sock"
	if err := c.Validate(); err != nil {
		t.Errorf("cri.listen set: %v", err)
	}
}
