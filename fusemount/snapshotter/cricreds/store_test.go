package cricreds

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

func resolve(t *testing.T, kc authn.Keychain, target authn.Resource) authn.AuthConfig {
	t.Helper()
	a, err := kc.Resolve(target)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := a.Authorization()
	if err != nil {
		t.Fatal(err)
	}
	return *cfg
}

func repo(t *testing.T, s string) name.Repository {
	t.Helper()
	r, err := name.NewRepository(s)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// Credentials are used for the repository they were pulled with and no
// other: not another repository of the registry, not the registry alone,
// not another registry; docker.io is index.docker.io.
func TestStoreScope(t *testing.T) {
	t.Parallel()
	s := NewStore()
	alice := &runtimeapi.AuthConfig{Username: "alice", Password: "pw"}
	if _, _, err := s.Set("reg.example:5000/team/app:v1", alice); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.Set("docker.io/library/python:3", &runtimeapi.AuthConfig{IdentityToken: "tok"}); err != nil {
		t.Fatal(err)
	}
	anon := authn.AuthConfig{}
	for _, tc := range []struct {
		name   string
		target authn.Resource
		want   authn.AuthConfig
	}{
		{"same repository", repo(t, "reg.example:5000/team/app"), authn.AuthConfig{Username: "alice", Password: "pw"}},
		{"other repository", repo(t, "reg.example:5000/team/other"), anon},
		{"parent path", repo(t, "reg.example:5000/team"), anon},
		{"registry alone", repo(t, "reg.example:5000/team/app").Registry, anon},
		{"other registry", repo(t, "reg.example:5001/team/app"), anon},
		{"docker hub, normalised", repo(t, "python"), authn.AuthConfig{IdentityToken: "tok"}},
		{"docker hub, other image", repo(t, "golang"), anon},
	} {
		if got := resolve(t, s, tc.target); got != tc.want {
			t.Errorf("%s: got %+v, want %+v", tc.name, got, tc.want)
		}
	}
	if got, ok := s.Lookup("reg.example:5000/team/app@sha256:" + strings.Repeat("0", 64)); !ok || got.Username != "alice" {
		t.Errorf("Lookup by digest: got %+v, %v; want alice's", got, ok)
	}
}

// The latest pull decides: new credentials replace old ones, a pull
// without credentials removes them, a failed pull's are put back only
// if nothing changed them since.
func TestStoreLatestPullDecides(t *testing.T) {
	t.Parallel()
	s := NewStore()
	var mu sync.Mutex
	var changed []string
	s.OnChange(func(r string) { mu.Lock(); changed = append(changed, r); mu.Unlock() })
	const img = "reg.example/app:v1"
	r := repo(t, "reg.example/app")
	one := &runtimeapi.AuthConfig{Username: "u", Password: "one"}
	two := &runtimeapi.AuthConfig{Username: "u", Password: "two"}
	s.Set(img, one)
	prev, had, _ := s.Set(img, two)
	if !had || prev.Password != "one" {
		t.Fatalf("Set returned %+v, %v; want the first credentials", prev, had)
	}
	if got := resolve(t, s, r); got.Password != "two" {
		t.Errorf("after a second pull: %+v, want the second credentials", got)
	}
	// The second pull failed: the first's come back.
	s.Restore(img, two, prev, had)
	if got := resolve(t, s, r); got.Password != "one" {
		t.Errorf("after the failed pull: %+v, want the first credentials back", got)
	}
	// A failed pull whose credentials a later pull replaced restores
	// nothing.
	prev, had, _ = s.Set(img, two)
	s.Set("reg.example/app:v2", one)
	s.Restore(img, two, prev, had)
	if got := resolve(t, s, r); got.Password != "one" {
		t.Errorf("after a stale restore: %+v, want the latest pull's", got)
	}
	// Same credentials again: no change reported.
	s.Set(img, one)
	// A pull without credentials removes them.
	s.Set(img, nil)
	if got := resolve(t, s, r); got != (authn.AuthConfig{}) {
		t.Errorf("after a pull without credentials: %+v, want anonymous", got)
	}
	s.Set(img, &runtimeapi.AuthConfig{ServerAddress: "ignored"})
	if _, ok := s.Lookup(img); ok {
		t.Errorf("credentials recorded for a pull that carried only a server address")
	}
	if _, _, err := s.Set("Not A Reference!", one); err == nil {
		t.Errorf("Set of a malformed reference succeeded")
	}
	mu.Lock()
	defer mu.Unlock()
	// one, two, restore(one), two, one (v2), restore: none, same: none, nil.
	if want := 6; len(changed) != want || slices.ContainsFunc(changed, func(c string) bool { return c != "reg.example/app" }) {
		t.Errorf("changes reported: %v, want %d of reg.example/app", changed, want)
	}
}

// The store forgets the least recently pulled repository past its bound.
func TestStoreBound(t *testing.T) {
	t.Parallel()
	s := NewStore()
	for i := range MaxRepositories + 1 {
		if _, _, err := s.Set("reg.example/app"+itoa(i)+":v1", &runtimeapi.AuthConfig{Username: "u", Password: itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := s.Lookup("reg.example/app0:v1"); ok {
		t.Errorf("the oldest repository is still remembered past %d", MaxRepositories)
	}
	if got, ok := s.Lookup("reg.example/app" + itoa(MaxRepositories) + ":v1"); !ok || got.Password != itoa(MaxRepositories) {
		t.Errorf("the newest repository: got %+v, %v", got, ok)
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

// A daemon's docker config gives the credentials to its registry only,
// and go-containerregistry's default keychain reads them back.
func TestDockerConfig(t *testing.T) {
	for _, tc := range []struct {
		repo string
		cfg  authn.AuthConfig
		want authn.AuthConfig
	}{
		{"reg.example:5000/team/app", authn.AuthConfig{Username: "alice", Password: "pw"}, authn.AuthConfig{Username: "alice", Password: "pw"}},
		{"index.docker.io/library/python", authn.AuthConfig{IdentityToken: "refresh"}, authn.AuthConfig{IdentityToken: "refresh"}},
		{"reg.example/app", authn.AuthConfig{RegistryToken: "bearer"}, authn.AuthConfig{RegistryToken: "bearer"}},
	} {
		data, err := DockerConfig(tc.repo, tc.cfg)
		if err != nil {
			t.Fatal(err)
		}
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
			t.Fatal(err)
		}
		t.Setenv("DOCKER_CONFIG", dir)
		if got := resolve(t, authn.DefaultKeychain, repo(t, tc.repo)); got.Username != tc.want.Username || got.Password != tc.want.Password ||
			got.IdentityToken != tc.want.IdentityToken || got.RegistryToken != tc.want.RegistryToken {
			t.Errorf("%s: the default keychain read %+v, want %+v", tc.repo, got, tc.want)
		}
		other := repo(t, "elsewhere.example/app")
		if got := resolve(t, authn.DefaultKeychain, other); got != (authn.AuthConfig{}) {
			t.Errorf("%s: another registry got %+v, want anonymous", tc.repo, got)
		}
	}
	if _, err := DockerConfig("not a repo!", authn.AuthConfig{}); err == nil {
		t.Errorf("DockerConfig of a malformed repository succeeded")
	}
}

// Credentials whose ServerAddress names another registry are not used
// for the image, as containerd's CRI does not use them.
func TestStoreServerAddress(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		image, server string
		want          bool
	}{
		{"reg.example:5000/app:v1", "", true},
		{"reg.example:5000/app:v1", "reg.example:5000", true},
		{"reg.example:5000/app:v1", "https://reg.example:5000", true},
		{"reg.example:5000/app:v1", "https://reg.example:5001", false},
		{"reg.example:5000/app:v1", "other.example", false},
		{"docker.io/library/python:3", "https://index.docker.io/v1/", true},
		{"python:3", "registry-1.docker.io", true},
		{"python:3", "reg.example", false},
	} {
		s := NewStore()
		if _, _, err := s.Set(tc.image, &runtimeapi.AuthConfig{Username: "u", Password: "p", ServerAddress: tc.server}); err != nil {
			t.Fatal(err)
		}
		if _, got := s.Lookup(tc.image); got != tc.want {
			t.Errorf("%s with server address %q: recorded %v, want %v", tc.image, tc.server, got, tc.want)
		}
	}
}
