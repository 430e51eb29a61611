package convert_test

import (
	"path/filepath"
	"testing"

	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

// TestRegistryRoundTrip converts to and from a real distribution registry
// (docker-registry): it accepts the RAFS media types, reads by range work
// against it, and the registry changes nothing about the result.
func TestRegistryRoundTrip(t *testing.T) {
	t.Parallel()
	host := rafstest.StartRegistry(t)
	layout := writeCorpus(t, "base-v1")
	src := "oci:" + layout + ":base-v1"
	local := mustConvert(t, src, "oci:"+layout+":base-v1-rafs", options(t))
	want := unpack(t, mustOpen(t, "oci:"+layout+":base-v1-rafs"))

	t.Run("oci to docker", func(t *testing.T) {
		dst := "docker://" + host + "/corpus/x:rafs"
		res := mustConvert(t, src, dst, options(t))
		if res.Digest != local.Digest {
			t.Errorf("manifest digest: got %s, want %s (as converted to oci:)", res.Digest, local.Digest)
		}
		img := mustOpen(t, dst)
		if got := img.Digest.String(); got != local.Digest {
			t.Errorf("opened manifest digest: got %s, want %s", got, local.Digest)
		}
		mustCheck(t, img)
		sameTree(t, want, unpack(t, img))
	})

	t.Run("docker to oci", func(t *testing.T) {
		plain := "docker://" + host + "/corpus/plain:v1"
		pushImage(t, src, plain)
		out := "oci:" + filepath.Join(t.TempDir(), "out") + ":from-registry"
		res := mustConvert(t, plain, out, options(t))
		if res.SourceDigest != local.SourceDigest {
			t.Errorf("source digest: got %s, want %s", res.SourceDigest, local.SourceDigest)
		}
		if res.Digest != local.Digest {
			t.Errorf("manifest digest: got %s, want %s (as converted from oci:)", res.Digest, local.Digest)
		}
		img := mustOpen(t, out)
		mustCheck(t, img)
		sameTree(t, want, unpack(t, img))
	})

	t.Run("index in registry", func(t *testing.T) {
		dst := "docker://" + host + "/corpus/x:index"
		opts := options(t)
		opts.Index = true
		res := mustConvert(t, src, dst, opts)
		if res.IndexDigest == "" {
			t.Fatal("got no index digest, want one")
		}
		img := mustOpen(t, dst)
		if got := img.Digest.String(); got != local.Digest {
			t.Errorf("opened manifest digest: got %s, want %s (the RAFS manifest in the index)", got, local.Digest)
		}
		mustCheck(t, img)
	})
}

// pushImage copies the image src to dst.
func pushImage(t *testing.T, src, dst string) {
	t.Helper()
	sr, err := transport.Parse(src, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	dr, err := transport.Parse(dst, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	img, err := transport.ReadImage(t.Context(), sr, transport.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := transport.WriteImage(t.Context(), dr, img, transport.Options{}); err != nil {
		t.Fatal(err)
	}
}
