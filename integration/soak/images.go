package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"path/filepath"
	"sort"
	"strconv"

	"damselfly/integration/harness"
	"damselfly/rafs"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/sample"
)

// image is one generated source image, converted to RAFS in the registry
// (repository soak/NAME, tag rafs), with umoci's unpacking of the source as
// the reference every read is compared with.
type image struct {
	name  string
	root  string // umoci's rootfs of the source
	files []file // regular, non-empty files of root
	// blobs are the RAFS data blobs of the converted image (digest to
	// size); images that share a base layer share its blob.
	blobs map[string]int64
}

type file struct {
	path string // relative to the image root
	size int64
}

func (im *image) ref(registry string) string {
	return "docker://" + registry + "/soak/" + im.name + ":rafs"
}

// imageSpec describes an image of the soak: the sample generator at a seed
// and scale, and optionally the base (first) layer of another image, so
// that some images share a blob.
type imageSpec struct {
	name  string
	seed  uint64
	scale float64
	base  string // name of the image whose base layer this one reuses
}

// imageSpecs are the soak's images at a scale: four distinct images of
// different sizes, two of them built on another's base layer.
func imageSpecs(scale float64) []imageSpec {
	return []imageSpec{
		{name: "alpha", seed: 11, scale: scale},
		{name: "beta", seed: 12, scale: scale * 1.5},
		{name: "gamma", seed: 13, scale: scale * 0.8, base: "alpha"},
		{name: "delta", seed: 14, scale: scale * 0.6, base: "beta"},
	}
}

// buildImages generates, unpacks and converts every image into the
// registry at regHost, with chunks of chunkSize. The conversion is
// `damselfly convert` (binary): the tool users run, and outside the
// harness's process, which may be built with the race detector.
func buildImages(ctx context.Context, binary, dir, regHost string, specs []imageSpec, chunkSize uint32) ([]*image, error) {
	srcs := map[string]rafstest.Image{}
	var out []*image
	for _, s := range specs {
		src := sample.Generate("src", sample.Options{Seed: s.seed, Scale: s.scale})
		if s.base != "" {
			b, ok := srcs[s.base]
			if !ok {
				return nil, fmt.Errorf("image %s: base %s is not built before it", s.name, s.base)
			}
			src.Layers[0] = b.Layers[0]
		}
		srcs[s.name] = src
		im, err := buildImage(ctx, binary, filepath.Join(dir, s.name), regHost, s.name, src, chunkSize)
		if err != nil {
			return nil, err
		}
		out = append(out, im)
	}
	return out, nil
}

func buildImage(ctx context.Context, binary, dir, regHost, name string, src rafstest.Image, chunkSize uint32) (*image, error) {
	u, err := harness.Unpack(ctx, dir, src)
	if err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	root := u.Root
	im := &image{name: name, root: root}
	if _, err := harness.Convert(ctx, binary, u.Ref(), im.ref(regHost), "--chunk-size", strconv.Itoa(int(chunkSize))); err != nil {
		return nil, fmt.Errorf("image %s: %w", name, err)
	}
	err = filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		if info.Size() > 0 {
			rel, _ := filepath.Rel(root, p)
			im.files = append(im.files, file{path: rel, size: info.Size()})
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	sort.Slice(im.files, func(i, j int) bool { return im.files[i].path < im.files[j].path })
	if im.blobs, err = rafsBlobs(ctx, regHost, name); err != nil {
		return nil, err
	}
	return im, nil
}

// rafsBlobs reads the converted image's manifest from the registry and
// returns its data blobs by digest with their sizes.
func rafsBlobs(ctx context.Context, regHost, name string) (map[string]int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+regHost+"/v2/soak/"+name+"/manifests/rafs", nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("manifest of soak/%s: %s", name, resp.Status)
	}
	var m struct {
		Layers []struct {
			MediaType string `json:"mediaType"`
			Digest    string `json:"digest"`
			Size      int64  `json:"size"`
		} `json:"layers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&m); err != nil {
		return nil, fmt.Errorf("manifest of soak/%s: %w", name, err)
	}
	blobs := map[string]int64{}
	for _, l := range m.Layers {
		if rafs.IsBlobMediaType(l.MediaType) {
			blobs[l.Digest] = l.Size
		}
	}
	if len(blobs) == 0 {
		return nil, fmt.Errorf("manifest of soak/%s has no RAFS blob layers", name)
	}
	return blobs, nil
}

// workingSet is the bytes of distinct data blobs over images: what a node
// cache would hold if every chunk of every image were read.
func workingSet(images []*image) int64 {
	seen := map[string]bool{}
	var n int64
	for _, im := range images {
		for d, size := range im.blobs {
			if !seen[d] {
				seen[d] = true
				n += size
			}
		}
	}
	return n
}

// sharedBlobs counts data blobs that appear in more than one image.
func sharedBlobs(images []*image) int {
	count := map[string]int{}
	for _, im := range images {
		for d := range im.blobs {
			count[d]++
		}
	}
	n := 0
	for _, c := range count {
		if c > 1 {
			n++
		}
	}
	return n
}
