package cricreds

import (
	"encoding/base64"
	"encoding/json"
	"fmt"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
)

// DockerConfig returns a docker config.json that gives cfg for repo's
// registry and nothing else: what a mount daemon of an image in repo
// reads through DOCKER_CONFIG (go-containerregistry's default keychain,
// which reads the file at every resolution, so a rewrite reaches a
// running daemon).
func DockerConfig(repo string, cfg authn.AuthConfig) ([]byte, error) {
	r, err := name.NewRepository(repo)
	if err != nil {
		return nil, fmt.Errorf("repository %q: %w", repo, err)
	}
	key := r.RegistryStr()
	if key == name.DefaultRegistry {
		key = authn.DefaultAuthKey
	}
	entry := map[string]string{}
	switch {
	case cfg.Auth != "":
		entry["auth"] = cfg.Auth
	case cfg.Username != "" || cfg.Password != "":
		entry["auth"] = base64.StdEncoding.EncodeToString([]byte(cfg.Username + ":" + cfg.Password))
	}
	if cfg.IdentityToken != "" {
		entry["identitytoken"] = cfg.IdentityToken
	}
	if cfg.RegistryToken != "" {
		entry["registrytoken"] = cfg.RegistryToken
	}
	return json.Marshal(map[string]any{"auths": map[string]any{key: entry}})
}
