package snapshotter

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"damselfly/fusemount/snapshotter/cricreds"
)

// A mount daemon of an image that Credentials cover reads with them: the
// snapshotter writes them as a docker config of the daemon's own,
// mounts/<id>/docker/config.json (directory 0700, file 0600, holding
// that registry's entry only), and starts the daemon with DOCKER_CONFIG
// pointing there. go-containerregistry's default keychain reads the
// file at every authentication, so credentials a later pull hands over
// (a refreshed token) reach a running daemon when they are rewritten
// (credentialsChanged). An image they do not cover gets no such file
// and the node's docker config, as before. The file outlives the
// snapshotter: credentials live only in its memory, so a daemon it
// starts again after its own restart (one that died) gets the file the
// last pull left, until a pull of the repository changes it.

// dockerConfigDir is the daemon's own DOCKER_CONFIG directory.
func (p *daemons) dockerConfigDir(id string) string { return filepath.Join(p.dir(id), "docker") }

// writeCredentials writes the docker config of daemon id for image
// (docker://HOST/REPO@DIGEST) from the Credentials and returns its
// directory. With no credentials recorded it keeps the file an earlier
// pull left (see above) and returns its directory, or "" if there is
// none.
func (p *daemons) writeCredentials(id, image string) (string, error) {
	if p.creds == nil {
		return "", nil
	}
	dir := p.dockerConfigDir(id)
	ref := strings.TrimPrefix(image, "docker://")
	cfg, ok := p.creds.Lookup(ref)
	if !ok {
		if _, err := os.Stat(filepath.Join(dir, "config.json")); err == nil {
			return dir, nil
		}
		return "", nil
	}
	repo, err := cricreds.Repository(ref)
	if err != nil {
		return "", err
	}
	data, err := cricreds.DockerConfig(repo, cfg)
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", err
	}
	tmp, err := os.CreateTemp(dir, ".config-*.json")
	if err != nil {
		return "", err
	}
	_, werr := tmp.Write(data)
	if err := errors.Join(werr, tmp.Chmod(0o600), tmp.Close()); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write the credentials of %s: %w", image, err)
	}
	if err := os.Rename(tmp.Name(), filepath.Join(dir, "config.json")); err != nil {
		os.Remove(tmp.Name())
		return "", fmt.Errorf("write the credentials of %s: %w", image, err)
	}
	return dir, nil
}

// credentialsChanged rewrites the docker config of every known daemon
// of an image in repo (HOST/REPO), or removes it when the repository's
// credentials were removed (a pull without any succeeded, so the
// registry lets anyone read). A daemon started with the node's docker
// config (none covered it then) keeps that until it is started again;
// one whose file was removed reads anonymously.
func (p *daemons) credentialsChanged(repo string) {
	p.mu.Lock()
	var ids, images []string
	for id, d := range p.m {
		ids = append(ids, id)
		images = append(images, d.state.Image)
	}
	p.mu.Unlock()
	for i, image := range images {
		r, err := cricreds.Repository(strings.TrimPrefix(image, "docker://"))
		if err != nil || r != repo {
			continue
		}
		if _, ok := p.creds.Lookup(strings.TrimPrefix(image, "docker://")); !ok {
			if err := os.RemoveAll(p.dockerConfigDir(ids[i])); err != nil {
				p.log.Warn("remove the credentials of a mount daemon", "image", image, "err", err)
			}
			continue
		}
		if _, err := p.writeCredentials(ids[i], image); err != nil {
			p.log.Warn("credentials of a mount daemon", "image", image, "err", err)
		}
	}
}
