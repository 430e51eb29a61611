package preheat

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"

	rimage "damselfly/rafs/image"
	"damselfly/rafs/registry"
	"damselfly/rafs/transport"
)

// open opens a docker:// reference through the registry it names and
// returns the image and where its blobs are for the node's reads. Other
// transports (local paths) are refused: a scheduler names images, not
// files on this node.
func (w *Worker) open(ctx context.Context, ref string, tr http.RoundTripper) (*rimage.Image, registry.Ref, error) {
	if !strings.HasPrefix(ref, transport.Docker+"://") {
		return nil, registry.Ref{}, fmt.Errorf("image %q: only docker:// references can be preheated", ref)
	}
	r, err := transport.Parse(ref, transport.Options{})
	if err != nil {
		return nil, registry.Ref{}, err
	}
	reg := r.Name.Context().Registry
	opts := transport.Options{
		Insecure:  slices.Contains(w.cfg.PlainHTTP, reg.RegistryStr()),
		Keychain:  fileKeychain{path: w.cfg.DockerConfigFile},
		Transport: tr,
	}
	r, err = transport.Parse(ref, opts)
	if err != nil {
		return nil, registry.Ref{}, err
	}
	reg = r.Name.Context().Registry
	octx, cancel := context.WithTimeout(ctx, w.cfg.OpenTimeout)
	defer cancel()
	img, err := rimage.Open(octx, ref, rimage.Options{Transport: opts, MaxBootstrapSize: w.cfg.MaxBootstrapSize})
	if err != nil {
		return nil, registry.Ref{}, err
	}
	up := registry.Ref{Registry: reg.Scheme() + "://" + reg.RegistryStr(), Repo: r.Name.Context().RepositoryStr()}
	return img, up, nil
}
