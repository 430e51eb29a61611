package rafstest

import (
	"crypto/sha256"
	"encoding/binary"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
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
