package cricreds

import (
	"fmt"
	"net/url"
	"sync"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	lru "github.com/hashicorp/golang-lru/v2"
	runtimeapi "k8s.io/cri-api/pkg/apis/runtime/v1"
)

// MaxRepositories bounds the repositories a Store remembers credentials
// for; the least recently pulled are forgotten first.
const MaxRepositories = 4096

// Store holds the credentials of the latest pull of each repository. It
// is an authn.Keychain. Its methods are safe for concurrent use.
type Store struct {
	mu    sync.Mutex
	repos *lru.Cache[string, authn.AuthConfig]
	// onChange is called (outside mu) with a repository whose
	// credentials changed.
	onChange func(repo string)
}

var _ authn.Keychain = (*Store)(nil)

// NewStore returns an empty Store.
func NewStore() *Store {
	c, _ := lru.New[string, authn.AuthConfig](MaxRepositories)
	return &Store{repos: c}
}

// OnChange sets f to be called with a repository (as Repository returns
// it) after its credentials were set, changed or removed; f must not
// block for long. It replaces an earlier f.
func (s *Store) OnChange(f func(repo string)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.onChange = f
}

// Repository returns the key image (a reference as CRI and containerd
// spell it, e.g. docker.io/library/app:1 or HOST/REPO@sha256:...) is
// stored under: REGISTRY/REPOSITORY, docker.io normalised to
// index.docker.io.
func Repository(image string) (string, error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return "", fmt.Errorf("image reference %q: %w", image, err)
	}
	return ref.Context().Name(), nil
}

// Set records auth as the credentials of image's repository; nil or
// empty credentials remove what was recorded, and so do credentials
// whose ServerAddress names another registry (containerd's CRI does not
// use those for the image either). It returns the credentials recorded
// before and whether there were any, for Restore.
func (s *Store) Set(image string, auth *runtimeapi.AuthConfig) (prev authn.AuthConfig, had bool, err error) {
	ref, err := name.ParseReference(image)
	if err != nil {
		return authn.AuthConfig{}, false, fmt.Errorf("image reference %q: %w", image, err)
	}
	repo := ref.Context().Name()
	cfg := fromCRI(auth)
	if !forRegistry(auth.GetServerAddress(), ref.Context().RegistryStr()) {
		cfg = authn.AuthConfig{}
	}
	s.mu.Lock()
	prev, had = s.repos.Peek(repo)
	if cfg == (authn.AuthConfig{}) {
		s.repos.Remove(repo)
	} else {
		s.repos.Add(repo, cfg)
	}
	f := s.onChange
	s.mu.Unlock()
	if f != nil && (had || cfg != (authn.AuthConfig{})) && prev != cfg {
		f(repo)
	}
	return prev, had, nil
}

// Restore puts back what Set returned for image, but only if the
// repository still holds the credentials of auth (no later pull changed
// them): a pull that failed does not replace credentials that worked.
func (s *Store) Restore(image string, auth *runtimeapi.AuthConfig, prev authn.AuthConfig, had bool) {
	repo, err := Repository(image)
	if err != nil {
		return
	}
	cfg := fromCRI(auth)
	if ref, err := name.ParseReference(image); err != nil || !forRegistry(auth.GetServerAddress(), ref.Context().RegistryStr()) {
		cfg = authn.AuthConfig{}
	}
	s.mu.Lock()
	cur, ok := s.repos.Peek(repo)
	if ok != (cfg != (authn.AuthConfig{})) || cur != cfg {
		s.mu.Unlock()
		return
	}
	if had {
		s.repos.Add(repo, prev)
	} else {
		s.repos.Remove(repo)
	}
	f := s.onChange
	s.mu.Unlock()
	if f != nil && (!had || prev != cfg) {
		f(repo)
	}
}

// Lookup returns the credentials recorded for image's repository.
func (s *Store) Lookup(image string) (authn.AuthConfig, bool) {
	repo, err := Repository(image)
	if err != nil {
		return authn.AuthConfig{}, false
	}
	return s.lookupRepo(repo)
}

func (s *Store) lookupRepo(repo string) (authn.AuthConfig, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.repos.Get(repo)
}

// Resolve returns the credentials of the repository target names, or
// anonymous: for a repository with none recorded, and for a target that
// names a registry only (credentials belong to a repository).
func (s *Store) Resolve(target authn.Resource) (authn.Authenticator, error) {
	repo, ok := target.(name.Repository)
	if !ok {
		return authn.Anonymous, nil
	}
	cfg, ok := s.lookupRepo(repo.Name())
	if !ok {
		return authn.Anonymous, nil
	}
	return authn.FromConfig(cfg), nil
}

// fromCRI copies CRI's AuthConfig; ServerAddress is not used (the
// repository is the image's).
func fromCRI(a *runtimeapi.AuthConfig) authn.AuthConfig {
	if a == nil {
		return authn.AuthConfig{}
	}
	return authn.AuthConfig{
		Username:      a.GetUsername(),
		Password:      a.GetPassword(),
		Auth:          a.GetAuth(),
		IdentityToken: a.GetIdentityToken(),
		RegistryToken: a.GetRegistryToken(),
	}
}

// forRegistry reports whether credentials given for serverAddress (CRI's
// AuthConfig.ServerAddress: empty, a host, or a URL such as
// https://index.docker.io/v1/) apply to registry (go-containerregistry's
// RegistryStr). Docker Hub's names are one registry.
func forRegistry(serverAddress, registry string) bool {
	if serverAddress == "" {
		return true
	}
	host := serverAddress
	if u, err := url.Parse(serverAddress); err == nil && u.Host != "" {
		host = u.Host
	}
	hub := func(h string) string {
		switch h {
		case "docker.io", "registry-1.docker.io", name.DefaultRegistry:
			return name.DefaultRegistry
		}
		return h
	}
	return hub(host) == hub(registry)
}
