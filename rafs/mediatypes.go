package rafs

// Media types and annotations of a RAFS image in an OCI manifest; see
// FORMAT.md. A RAFS manifest lists its blobs as layers in blob-table
// order, then the bootstrap as the last layer.
//
// The media types sit under application/vnd.oci.image.layer. because
// containerd (1.6 and 2.x: images.IsLayerType, used by its unpacker, CRI
// and ctr alike) counts only those and Docker's types as layers: it
// asks a snapshotter about a layer only if it counts it. Nydus did the
// same (application/vnd.oci.image.layer.nydus.blob.v1). Their bases are
// not OCI's tar type, so a containerd without damselfly's snapshotter
// finds no stream processor for them and fails the unpack naming the
// media type, instead of untarring chunk data (FORMAT.md, "In an OCI
// manifest"). Images written before that used the Legacy types; every
// reader accepts both, through IsBlobMediaType and
// IsBootstrapMediaType.
const (
	// MediaTypeBlob is a blob of concatenated stored chunks.
	MediaTypeBlob = "application/vnd.oci.image.layer.damselfly.rafs.blob.v1"
	// MediaTypeBootstrap is a zstd-compressed bootstrap.
	MediaTypeBootstrap = "application/vnd.oci.image.layer.damselfly.rafs.bootstrap.v1+zstd"

	// LegacyMediaTypeBlob is MediaTypeBlob as converters before
	// 2026-12-04 wrote it; read, never written.
	LegacyMediaTypeBlob = "application/vnd.damselfly.rafs.blob.v1"
	// LegacyMediaTypeBootstrap is MediaTypeBootstrap as converters
	// before 2026-12-04 wrote it; read, never written.
	LegacyMediaTypeBootstrap = "application/vnd.damselfly.rafs.bootstrap.v1+zstd"

	// AnnotationVersion on the manifest marks a RAFS image and names the
	// bootstrap format version.
	AnnotationVersion = "io.damselfly.rafs.version"
	// AnnotationSource on the manifest records the source image's manifest
	// digest.
	AnnotationSource = "io.damselfly.rafs.source"
	// AnnotationChunkSize on the manifest records the chunk size.
	AnnotationChunkSize = "io.damselfly.rafs.chunk-size"
	// AnnotationBootstrapDigest on the bootstrap layer is the digest of
	// the uncompressed bootstrap.
	AnnotationBootstrapDigest = "io.damselfly.rafs.bootstrap.digest"
	// AnnotationBootstrapSize on the bootstrap layer is its uncompressed
	// size in bytes.
	AnnotationBootstrapSize = "io.damselfly.rafs.bootstrap.size"
	// AnnotationBlobChunks on a blob layer is its chunk count.
	AnnotationBlobChunks = "io.damselfly.rafs.blob.chunks"
	// PlatformFeature marks the RAFS manifest in an image index that also
	// holds the plain OCI manifest.
	PlatformFeature = "damselfly.rafs.v1"
)

// IsBlobMediaType reports whether mt is the media type of a RAFS blob
// layer, current or legacy. Media types are compared exactly, as
// written: a RAFS manifest is machine-written.
func IsBlobMediaType(mt string) bool {
	return mt == MediaTypeBlob || mt == LegacyMediaTypeBlob
}

// IsBootstrapMediaType reports whether mt is the media type of a RAFS
// bootstrap layer, current or legacy.
func IsBootstrapMediaType(mt string) bool {
	return mt == MediaTypeBootstrap || mt == LegacyMediaTypeBootstrap
}

// IsMediaType reports whether mt is a RAFS layer media type, blob or
// bootstrap, current or legacy.
func IsMediaType(mt string) bool {
	return IsBlobMediaType(mt) || IsBootstrapMediaType(mt)
}
