package preheat

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/authn"
)

// maxDockerConfig bounds the docker config file read for preheats.
const maxDockerConfig = 1 << 20

// fileKeychain resolves registry credentials from one docker config file
// (its "auths" section), read on every use so that edits take effect. A
// missing file, or a registry it does not name, means anonymous.
type fileKeychain struct{ path string }

var _ authn.Keychain = fileKeychain{}

// Resolve implements authn.Keychain.
func (k fileKeychain) Resolve(r authn.Resource) (authn.Authenticator, error) {
	if k.path == "" {
		return authn.Anonymous, nil
	}
	f, err := os.Open(k.path)
	if errors.Is(err, os.ErrNotExist) {
		return authn.Anonymous, nil
	}
	if err != nil {
		return nil, fmt.Errorf("docker config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDockerConfig+1))
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", k.path, err)
	}
	if len(data) > maxDockerConfig {
		return nil, fmt.Errorf("docker config %s: larger than %d bytes", k.path, maxDockerConfig)
	}
	var cfg struct {
		Auths map[string]authn.AuthConfig `json:"auths"`
	}
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("docker config %s: %w", k.path, err)
	}
	host := r.RegistryStr()
	keys := []string{host, "https://" + host, "http://" + host, "https://" + host + "/v1/"}
	if host == "index.docker.io" {
		keys = append(keys, "docker.io", "https://index.docker.io/v1/")
	}
	for _, key := range keys {
		if a, ok := cfg.Auths[key]; ok {
			return authn.FromConfig(a), nil
		}
	}
	return authn.Anonymous, nil
}
