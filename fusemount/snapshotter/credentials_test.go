package snapshotter

import (
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"

	"damselfly/fusemount/snapshotter/cricreds"
)

// A mount daemon of an image the pull's credentials cover gets a docker
// config of its own with them (0600, that registry only) through
// DOCKER_CONFIG; a rewrite after a later pull reaches the file; an
// image they do not cover gets the node's docker config.
func TestDaemonCredentials(t *testing.T) {
	t.Setenv("DOCKER_CONFIG", "/node/docker")
	cfg := Default()
	cfg.Root = t.TempDir()
	cfg.Mount.Binary = "/bin/true"
	store := cricreds.NewStore()
	p := newDaemons(cfg, store, slog.New(slog.DiscardHandler))
	store.OnChange(p.credentialsChanged)
	const private = "docker://reg.example:5000/team/app@sha256:" + "1111111111111111111111111111111111111111111111111111111111111111"
	const public = "docker://reg.example:5000/pub/app@sha256:" + "2222222222222222222222222222222222222222222222222222222222222222"
	if _, _, err := store.Set("reg.example:5000/team/app:v1", &runtimeapi.AuthConfig{Username: "alice", Password: "one"}); err != nil {
		t.Fatal(err)
	}
	env := func(image string) (string, []string) {
		t.Helper()
		d := p.get("sha256:"+image[len(image)-64:], image)
		cmd, err := p.mountCommand(d.state, p.mountpoint(d.id), p.socket(d.id))
		if err != nil {
			t.Fatal(err)
		}
		var dc []string
		for _, kv := range cmd.Env {
			if v, ok := strings.CutPrefix(kv, "DOCKER_CONFIG="); ok {
				dc = append(dc, v)
			}
		}
		return d.id, dc
	}
	read := func(dir string) authn.AuthConfig {
		t.Helper()
		st, err := os.Stat(filepath.Join(dir, "config.json"))
		if err != nil {
			t.Fatal(err)
		}
		if st.Mode().Perm() != 0o600 {
			t.Errorf("config.json mode %v, want 0600", st.Mode().Perm())
		}
		t.Setenv("DOCKER_CONFIG", dir)
		defer t.Setenv("DOCKER_CONFIG", "/node/docker")
		repo, _ := cricreds.Repository("reg.example:5000/team/app")
		a, err := authn.DefaultKeychain.Resolve(mustRepo(t, repo))
		if err != nil {
			t.Fatal(err)
		}
		c, err := a.Authorization()
		if err != nil {
			t.Fatal(err)
		}
		return *c
	}

	id, dc := env(private)
	if want := p.dockerConfigDir(id); !slices.Equal(dc, []string{want}) {
		t.Fatalf("DOCKER_CONFIG of the private image's daemon: %v, want only %s", dc, want)
	}
	if got := read(dc[0]); got.Username != "alice" || got.Password != "one" {
		t.Errorf("the daemon's docker config gives %+v, want alice's", got)
	}
	// A later pull with refreshed credentials rewrites the file.
	store.Set("reg.example:5000/team/app:v2", &runtimeapi.AuthConfig{Username: "alice", Password: "two"})
	if got := read(dc[0]); got.Password != "two" {
		t.Errorf("after a later pull the daemon's docker config gives %+v, want the new password", got)
	}
	// A snapshotter restarted (credentials in memory gone) that starts
	// the daemon again keeps the file the last pull left.
	restarted := newDaemons(cfg, cricreds.NewStore(), slog.New(slog.DiscardHandler))
	d := restarted.get("sha256:"+private[len(private)-64:], private)
	cmd, err := restarted.mountCommand(d.state, restarted.mountpoint(d.id), restarted.socket(d.id))
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(cmd.Env, "DOCKER_CONFIG="+dc[0]) {
		t.Errorf("a daemon started again after a snapshotter restart: env %v, want DOCKER_CONFIG=%s", cmd.Env, dc[0])
	}
	if got := read(dc[0]); got.Password != "two" {
		t.Errorf("after a restart the daemon's docker config gives %+v, want the last pull's", got)
	}
	// An anonymous pull of the repository that succeeded removes them.
	store.Set("reg.example:5000/team/app:v3", nil)
	if _, err := os.Stat(filepath.Join(dc[0], "config.json")); !os.IsNotExist(err) {
		t.Errorf("credentials file after an anonymous pull of the repository: %v, want it removed", err)
	}

	if _, dc := env(public); !slices.Equal(dc, []string{"/node/docker"}) {
		t.Errorf("DOCKER_CONFIG of an image no pull's credentials cover: %v, want the node's", dc)
	}
}

func mustRepo(t *testing.T, s string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}
