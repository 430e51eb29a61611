package rafs

// Media types and annotations of a RAFS image in an OCI manifest; see
// FORMAT.md. A RAFS manifest lists its blobs as layers in blob-table
// order, then the bootstrap as the last layer.
const (
	// MediaTypeBlob is a blob of concatenated stored chunks.
	MediaTypeBlob = "application/vnd.damselfly.rafs.blob.v1"
	// MediaTypeBootstrap is a zstd-compressed bootstrap.
	MediaTypeBootstrap = "application/vnd.damselfly.rafs.bootstrap.v1+zstd"

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
