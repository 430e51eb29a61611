package registry

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"
)

// maxDockerConfig bounds the docker config file read.
const maxDockerConfig = 1 << 20

// dockerConfig is the part of a docker config.json this package reads.
type dockerConfig struct {
	Auths map[string]struct {
		Auth     string `json:"auth"`
		Username string `json:"username"`
		Password string `json:"password"`
	} `json:"auths"`
}

// nodeCreds holds the docker config file, read again when its size or
// modification time changes (one stat per use). Safe for concurrent use.
type nodeCreds struct {
	path string

	mu    sync.Mutex
	size  int64
	mtime time.Time
	data  []byte // nil: no file
}

// get returns the node's credentials for registry host as an
// Authorization value ("Basic ..."), or "" when the config file names
// none. A missing file means none.
func (n *nodeCreds) get(host string) (string, error) {
	if n.path == "" {
		return "", nil
	}
	data, err := n.load()
	if err != nil || data == nil {
		return "", err
	}
	return credsFor(data, host)
}

func (n *nodeCreds) load() ([]byte, error) {
	n.mu.Lock()
	defer n.mu.Unlock()
	fi, err := os.Stat(n.path)
	if errors.Is(err, os.ErrNotExist) {
		n.data = nil
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("docker config: %w", err)
	}
	if n.data != nil && fi.Size() == n.size && fi.ModTime().Equal(n.mtime) {
		return n.data, nil
	}
	if fi.Size() > maxDockerConfig {
		return nil, fmt.Errorf("docker config %s: larger than %d bytes", n.path, maxDockerConfig)
	}
	f, err := os.Open(n.path)
	if err != nil {
		return nil, fmt.Errorf("docker config: %w", err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxDockerConfig+1))
	if err != nil {
		return nil, fmt.Errorf("docker config %s: %w", n.path, err)
	}
	if len(data) > maxDockerConfig {
		return nil, fmt.Errorf("docker config %s: larger than %d bytes", n.path, maxDockerConfig)
	}
	n.data, n.size, n.mtime = data, fi.Size(), fi.ModTime()
	return data, nil
}

// credsFor finds host's credentials in a docker config.json.
func credsFor(data []byte, host string) (string, error) {
	var cfg dockerConfig
	if err := json.Unmarshal(data, &cfg); err != nil {
		return "", fmt.Errorf("docker config: %w", err)
	}
	for _, key := range authKeys(host) {
		for k, a := range cfg.Auths {
			if normaliseAuthKey(k) != key {
				continue
			}
			if a.Auth != "" {
				dec, err := base64.StdEncoding.DecodeString(a.Auth)
				if err != nil || !strings.Contains(string(dec), ":") {
					return "", fmt.Errorf("docker config: auth for %s is not base64(user:password)", k)
				}
				return "Basic " + a.Auth, nil
			}
			if a.Username != "" {
				return basicAuth(a.Username, a.Password), nil
			}
		}
	}
	return "", nil
}

// authKeys lists the config keys that may hold host's credentials,
// normalised: Docker Hub's are stored under its index URL.
func authKeys(host string) []string {
	host = strings.ToLower(host)
	switch host {
	case "registry-1.docker.io", "index.docker.io", "docker.io":
		return []string{"index.docker.io", "registry-1.docker.io", "docker.io"}
	}
	return []string{host}
}

// normaliseAuthKey turns "https://host/v1/" into "host".
func normaliseAuthKey(k string) string {
	k = strings.ToLower(k)
	k = strings.TrimPrefix(k, "https://")
	k = strings.TrimPrefix(k, "http://")
	k, _, _ = strings.Cut(k, "/")
	return k
}

func basicAuth(user, pass string) string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
}
