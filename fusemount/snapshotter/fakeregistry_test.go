package snapshotter

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// fakeRegistry serves an original image, its RAFS sibling and an index
// of both from memory, and counts what it is asked.
type fakeRegistry struct {
	mu        sync.Mutex
	manifests map[string]*v1.Manifest // by docker://HOST/REPO@DIGEST
	configs   map[string]*v1.ConfigFile
	indexes   map[string]*v1.IndexManifest // by docker://HOST/REPO:TAG
	indexErr  error
	bootErr   error             // CheckBootstrap's error
	denied    map[string]bool   // images whose blobs cannot be read
	blobs     map[string][]byte // by digest
	indexReqs int
	blobReqs  map[string]int
}

var _ Registry = (*fakeRegistry)(nil)

func (f *fakeRegistry) Manifest(_ context.Context, image string) (*v1.Manifest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if m, ok := f.manifests[image]; ok {
		return m, nil
	}
	return nil, fmt.Errorf("manifest %s: not found", image)
}

func (f *fakeRegistry) CheckBootstrap(_ context.Context, image string) error {
	if f.bootErr != nil {
		return f.bootErr
	}
	m, err := f.Manifest(context.Background(), image)
	if err != nil {
		return err
	}
	if !isRAFSManifest(m) {
		return fmt.Errorf("%s is not RAFS", image)
	}
	return nil
}

func (f *fakeRegistry) Index(_ context.Context, ref string) (*v1.IndexManifest, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.indexReqs++
	if f.indexErr != nil {
		return nil, false, f.indexErr
	}
	idx, ok := f.indexes[ref]
	return idx, ok, nil
}

func (f *fakeRegistry) Config(_ context.Context, image string) (*v1.ConfigFile, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if c, ok := f.configs[image]; ok {
		return c, nil
	}
	return nil, fmt.Errorf("config of %s: not found", image)
}

func (f *fakeRegistry) Blob(_ context.Context, image, d string) (io.ReadCloser, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.blobReqs[d]++
	b, ok := f.blobs[d]
	if !ok || f.denied[image] {
		return nil, fmt.Errorf("blob %s of %s: not found", d, image)
	}
	return io.NopCloser(bytes.NewReader(b)), nil
}

func (f *fakeRegistry) counts() (index int, blobs map[string]int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	blobs = map[string]int{}
	for k, v := range f.blobReqs {
		blobs[k] = v
	}
	return f.indexReqs, blobs
}

// fakeLayer is a gzip tar layer: its blob, digest and diff ID.
type fakeLayer struct {
	blob           []byte
	digest, diffID v1.Hash
}

func newFakeLayer(t *testing.T, files map[string]string) fakeLayer {
	t.Helper()
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	for name, body := range files {
		if err := tw.WriteHeader(&tar.Header{Name: name, Mode: 0o644, Size: int64(len(body)), Typeflag: tar.TypeReg, ModTime: time.Unix(1, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write([]byte(body)); err != nil {
			t.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	var gb bytes.Buffer
	gw := gzip.NewWriter(&gb)
	gw.Write(tb.Bytes())
	gw.Close()
	hash := func(b []byte) v1.Hash {
		h, _, _ := v1.SHA256(bytes.NewReader(b))
		return h
	}
	return fakeLayer{blob: gb.Bytes(), digest: hash(gb.Bytes()), diffID: hash(tb.Bytes())}
}
