package registrytest

import "github.com/google/go-containerregistry/pkg/authn"

// basic is go-containerregistry credentials for pushes.
type basic struct{ user, pass string }

func (b *basic) Authorization() (*authn.AuthConfig, error) {
	return &authn.AuthConfig{Username: b.user, Password: b.pass}, nil
}
