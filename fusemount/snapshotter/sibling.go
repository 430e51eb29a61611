package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	godigest "github.com/opencontainers/go-digest"
	"github.com/opencontainers/image-spec/identity"

	"damselfly/rafs"
)

// sibling is the RAFS image that serves an original (non-RAFS)
// manifest containerd unpacks: the RAFS manifest of the same
// `convert --index` index, converted from it.
type sibling struct {
	manifest string   // the RAFS manifest's digest
	chain    []string // the chain IDs of the original's layers, bottom first
}

// errIndexMoved: the index the pulled reference names now does not
// list the manifest containerd unpacks; the tag moved since containerd
// resolved it.
var errIndexMoved = errors.New("the index does not list the manifest being unpacked")

// findSibling returns the RAFS manifest of idx that serves manifest,
// or "" if there is none. idx must list manifest itself, and the RAFS
// manifest must carry rafs.PlatformFeature in its descriptor's platform
// and, once read (digest-checked) by read, be RAFS with
// rafs.AnnotationSource equal to manifest. A candidate that cannot be
// read is an error: the caller falls back to the full pull.
func findSibling(ctx context.Context, idx *v1.IndexManifest, manifest string, read func(ctx context.Context, digest string) (*v1.Manifest, error)) (string, error) {
	listed := slices.ContainsFunc(idx.Manifests, func(d v1.Descriptor) bool { return d.Digest.String() == manifest })
	if !listed {
		return "", errIndexMoved
	}
	for _, d := range idx.Manifests {
		if d.Platform == nil || !slices.Contains(d.Platform.Features, rafs.PlatformFeature) || !d.MediaType.IsImage() {
			continue
		}
		m, err := read(ctx, d.Digest.String())
		if err != nil {
			return "", fmt.Errorf("RAFS manifest %s: %w", d.Digest, err)
		}
		if m.Annotations[rafs.AnnotationSource] != manifest || !isRAFSManifest(m) {
			continue
		}
		return d.Digest.String(), nil
	}
	return "", nil
}

// isRAFSManifest reports whether m is a RAFS manifest whose last layer
// is its bootstrap, as layerKind would serve it.
func isRAFSManifest(m *v1.Manifest) bool {
	if len(m.Layers) == 0 || !rafs.IsBootstrapMediaType(string(m.Layers[len(m.Layers)-1].MediaType)) {
		return false
	}
	_, err := layerKind(m, m.Layers[len(m.Layers)-1].Digest.String())
	return err == nil
}

// chainIDs returns the chain IDs of a config's layers, bottom first:
// the names containerd gives their snapshots.
func chainIDs(cf *v1.ConfigFile) []string {
	ds := make([]godigest.Digest, len(cf.RootFS.DiffIDs))
	for i, d := range cf.RootFS.DiffIDs {
		ds[i] = godigest.Digest(d.String())
	}
	out := make([]string, len(ds))
	for i, c := range identity.ChainIDs(ds) {
		out[i] = c.String()
	}
	return out
}

// siblingTTL is how long a lookup's answer is kept: one pull asks for
// every layer of its image in turn, and all of them must get the same
// answer.
const siblingTTL = 10 * time.Minute

// maxSiblingEntries bounds the cache of lookups.
const maxSiblingEntries = 256

// siblings caches lookups by (pulled reference, manifest digest); nil
// means none, for whatever reason. It is safe for concurrent use.
type siblings struct {
	mu sync.Mutex
	m  map[string]siblingEntry
}

type siblingEntry struct {
	sib *sibling
	at  time.Time
}

func (c *siblings) get(key string, now time.Time) (*sibling, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.m[key]
	if !ok || now.Sub(e.at) > siblingTTL {
		return nil, false
	}
	return e.sib, true
}

func (c *siblings) put(key string, sib *sibling, now time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]siblingEntry{}
	}
	if len(c.m) >= maxSiblingEntries {
		for k, e := range c.m {
			if now.Sub(e.at) > siblingTTL || len(c.m) >= maxSiblingEntries {
				delete(c.m, k)
			}
		}
	}
	c.m[key] = siblingEntry{sib: sib, at: now}
}

// sibling returns the RAFS sibling that serves the ordinary layer r,
// or nil. The pulled reference (CRI's image-ref label) is read again:
// when it names an index holding r's manifest and a RAFS manifest
// converted from it, that one serves the image. A reference by the
// manifest's own digest names no index and is not read. Anything that
// fails (the index, the RAFS manifest, the original's config) leaves
// the layer to containerd, with a warning naming the image: a pull
// containerd can do in full never fails here.
func (s *Snapshotter) sibling(ctx context.Context, r remoteLayer) *sibling {
	if strings.HasSuffix(r.ref, "@"+r.manifest) {
		return nil
	}
	key := r.ref + "\x00" + r.manifest
	if sib, ok := s.siblings.get(key, time.Now()); ok {
		return sib
	}
	sib, err := s.lookupSibling(ctx, r)
	if err != nil {
		if ctx.Err() != nil {
			// The pull was cancelled: nothing learned.
			return nil
		}
		s.log.Warn("cannot look for a RAFS image beside the one pulled; containerd pulls it in full", "image", r.ref, "manifest", r.manifest, "err", err)
	} else if sib != nil {
		s.log.Info("serving an image by its RAFS sibling", "image", r.ref, "manifest", r.manifest, "rafs", sib.manifest)
	}
	s.siblings.put(key, sib, time.Now())
	return sib
}

func (s *Snapshotter) lookupSibling(ctx context.Context, r remoteLayer) (*sibling, error) {
	idx, ok, err := s.reg.Index(ctx, "docker://"+r.ref)
	if err != nil || !ok {
		return nil, err
	}
	read := func(ctx context.Context, d string) (*v1.Manifest, error) {
		return s.reg.Manifest(ctx, r.repo+"@"+d)
	}
	rafsDigest, err := findSibling(ctx, idx, r.manifest, read)
	if err != nil || rafsDigest == "" {
		return nil, err
	}
	cf, err := s.reg.Config(ctx, r.image())
	if err != nil {
		return nil, err
	}
	m, err := s.reg.Manifest(ctx, r.image())
	if err != nil {
		return nil, err
	}
	if len(cf.RootFS.DiffIDs) != len(m.Layers) || len(m.Layers) == 0 {
		return nil, fmt.Errorf("manifest %s has %d layers and its config %d diff IDs", r.manifest, len(m.Layers), len(cf.RootFS.DiffIDs))
	}
	return &sibling{manifest: rafsDigest, chain: chainIDs(cf)}, nil
}
