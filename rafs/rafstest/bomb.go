package rafstest

import (
	"crypto/sha256"
	"encoding/binary"
	"fmt"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/layout"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Bootstrap bombs: layers that are tiny as stored and inflate to
// gigabytes. They are written by hand from the layouts in rafs/FORMAT.md
// and RFC 8878 (zstd), so they cost nothing to make and hold exactly
// what a hostile writer would put there.

// BootstrapHead returns the first 320 bytes of a bootstrap that declares
// a length of declared bytes: a superblock whose every field is valid and
// a root directory inode, the checksum taken over exactly these bytes.
// With declared == 320 it decodes as an empty image; followed by zeros up
// to any declared length it looks, to a reader that has not yet read to
// the end, like a large image.
func BootstrapHead(declared uint64) []byte {
	const sbSize, inodeSize = 256, 64
	b := make([]byte, sbSize+inodeSize)
	le := binary.LittleEndian
	copy(b, "DFLYRAFS")
	le.PutUint32(b[8:], 1)      // version
	le.PutUint32(b[16:], 1<<20) // chunk size
	b[20] = 1                   // zstd
	b[21] = 2                   // BLAKE3
	le.PutUint32(b[24:], 1)     // inodes
	le.PutUint32(b[28:], 1)     // root inode
	le.PutUint64(b[32:], declared)
	// Sections: the root inode, then seven empty ones where it ends.
	le.PutUint64(b[72:], sbSize)
	le.PutUint64(b[80:], inodeSize)
	for i := 1; i < 8; i++ {
		le.PutUint64(b[72+16*i:], sbSize+inodeSize)
	}
	root := b[sbSize:]
	le.PutUint32(root[0:], 0o040755) // directory
	le.PutUint32(root[12:], 2)       // nlink
	le.PutUint32(root[44:], 1)       // parent: itself
	sum := sha256.Sum256(b)
	copy(b[40:72], sum[:]) // checksum field taken as zero: it was
	return b
}

// zstd framing (RFC 8878, section 3.1.1).
const (
	zstdMagic    = 0xFD2FB528
	zstdBlockMax = 128 << 10
	blockRaw     = 0
	blockRLE     = 1
)

// ZstdBomb returns one zstd frame that inflates to prefix followed by
// zeros zero bytes: prefix in raw blocks, the zeros in RLE blocks of
// 128 KiB at 4 bytes each, so every GiB of zeros costs 32 KiB. The frame
// has a 128 KiB window, no content size and no checksum.
func ZstdBomb(prefix []byte, zeros int64) []byte {
	out := binary.LittleEndian.AppendUint32(nil, zstdMagic)
	out = append(out, 0x00, 7<<3) // no flags; window 2^(10+7)
	for len(prefix) > 0 {
		n := min(len(prefix), zstdBlockMax)
		out = appendBlockHeader(out, blockRaw, n, zeros == 0 && n == len(prefix))
		out = append(out, prefix[:n]...)
		prefix = prefix[n:]
	}
	for zeros > 0 {
		n := int(min(zeros, zstdBlockMax))
		zeros -= int64(n)
		out = appendBlockHeader(out, blockRLE, n, zeros == 0)
		out = append(out, 0)
	}
	return out
}

func appendBlockHeader(out []byte, typ, size int, last bool) []byte {
	h := typ<<1 | size<<3
	if last {
		h |= 1
	}
	return append(out, byte(h), byte(h>>8), byte(h>>16))
}

// ZstdWindowBomb returns a zstd frame whose header asks for a window of
// 2^log2 bytes (a single-segment frame of that content size when single
// is set, which makes the content size the window) and then holds one
// byte: a decoder that allocates the window a header names, before any
// output, allocates it here in full.
func ZstdWindowBomb(log2 uint, single bool) []byte {
	out := binary.LittleEndian.AppendUint32(nil, zstdMagic)
	if single {
		out = append(out, 0xE0) // single segment, 8-byte content size
		out = binary.LittleEndian.AppendUint64(out, 1<<log2)
	} else {
		out = append(out, 0x00, byte(log2-10)<<3)
	}
	out = appendBlockHeader(out, blockRaw, 1, false)
	return append(out, 'D')
}

// The names a RAFS manifest uses (rafs/mediatypes.go; FORMAT.md). They
// are spelled out here because this package must not import rafs, whose
// own tests use it; rafs/image's tests check that they agree.
const (
	MediaTypeBlob             = "application/vnd.oci.image.layer.damselfly.rafs.blob.v1"
	MediaTypeBootstrap        = "application/vnd.oci.image.layer.damselfly.rafs.bootstrap.v1+zstd"
	LegacyMediaTypeBlob       = "application/vnd.damselfly.rafs.blob.v1"
	LegacyMediaTypeBootstrap  = "application/vnd.damselfly.rafs.bootstrap.v1+zstd"
	AnnotationVersion         = "io.damselfly.rafs.version"
	AnnotationBootstrapSize   = "io.damselfly.rafs.bootstrap.size"
	AnnotationBootstrapDigest = "io.damselfly.rafs.bootstrap.digest"
)

// Bomb is a hostile bootstrap layer, as a RAFS manifest would list it.
type Bomb struct {
	// Name says what it does; it is also its tag in WriteBombLayout.
	Name string
	// Layer is the layer's bytes, a few hundred KiB at most.
	Layer []byte
	// Size is the bootstrap size annotation on the layer; "" for none.
	Size string
	// Want is a part of the error every reader must refuse it with.
	Want string
}

// Bombs returns bootstrap bombs, each under 200 KiB as stored and each
// inflating to (or asking for) gigabytes:
//
//   - "declares-4g": a superblock that declares 4 GiB, then 6 GiB of
//     zeros; no size annotation.
//   - "zeros-past-end": an honest 320-byte bootstrap, then 6 GiB of zeros;
//     no size annotation.
//   - "lying-annotation": the same, with a size annotation of 4 GiB - 1.
//   - "declares-500m": a superblock that declares 500 MiB, within the
//     default limit, with the annotation to match, then 6 GiB of zeros.
//   - "window-512m": a zstd frame that asks for a 512 MiB window.
func Bombs() []Bomb {
	const gib = 1 << 30
	honest := BootstrapHead(320)
	return []Bomb{
		{Name: "declares-4g", Layer: ZstdBomb(BootstrapHead(4*gib), 6*gib), Want: "exceeds the size limit"},
		{Name: "zeros-past-end", Layer: ZstdBomb(honest, 6*gib), Want: "goes on past the 320 bytes"},
		{Name: "lying-annotation", Layer: ZstdBomb(honest, 6*gib), Size: "4294967295", Want: "the manifest says 4294967295"},
		{Name: "declares-500m", Layer: ZstdBomb(BootstrapHead(500<<20), 6*gib), Size: "524288000", Want: "more than 256x"},
		{Name: "window-512m", Layer: ZstdWindowBomb(29, false), Want: "window size exceeded"},
	}
}

// Image returns b as the bootstrap layer of an image that is RAFS as far
// as its manifest goes (the version annotation, the bootstrap last).
func (b Bomb) Image() (v1.Image, error) {
	ann := map[string]string{}
	if b.Size != "" {
		ann[AnnotationBootstrapSize] = b.Size
	}
	return LayerImage(b.Layer, MediaTypeBootstrap, ann, map[string]string{AnnotationVersion: "1"})
}

// WriteBombLayout writes every bomb of Bombs into the OCI layout at dir
// (created if needed), tagged with its name.
func WriteBombLayout(dir string) error {
	p, err := layout.FromPath(dir)
	if err != nil {
		if p, err = layout.Write(dir, empty.Index); err != nil {
			return err
		}
	}
	for _, b := range Bombs() {
		img, err := b.Image()
		if err != nil {
			return fmt.Errorf("bomb %s: %w", b.Name, err)
		}
		if err := p.AppendImage(img, layout.WithAnnotations(map[string]string{RefNameAnnotation: b.Name})); err != nil {
			return fmt.Errorf("bomb %s: %w", b.Name, err)
		}
	}
	return nil
}

// LayerImage returns an OCI image (manifest media type OCI) with one layer
// holding data, of media type mt, with the given layer and manifest
// annotations: enough of a RAFS manifest for a reader to find its
// bootstrap layer, for tests that hand readers a hostile one.
func LayerImage(data []byte, mt string, layerAnn, manifestAnn map[string]string) (v1.Image, error) {
	img := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	img = mutate.ConfigMediaType(img, types.OCIConfigJSON)
	img, err := mutate.Append(img, mutate.Addendum{
		Layer:       static.NewLayer(data, types.MediaType(mt)),
		MediaType:   types.MediaType(mt),
		Annotations: layerAnn,
	})
	if err != nil {
		return nil, err
	}
	return mutate.Annotations(img, manifestAnn).(v1.Image), nil
}
