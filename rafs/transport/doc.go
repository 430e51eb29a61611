// Package transport reads and writes container images named by
// skopeo-style references, on top of go-containerregistry.
//
// A reference names where an image lives and how to reach it:
//
//	oci:PATH[:TAG]              an OCI image layout directory
//	docker-archive:PATH[:REF]   a `docker save` tarball
//	docker://HOST/REPO:TAG      a registry, by tag
//	docker://HOST/REPO@DIGEST   a registry, by digest
//
// [Parse] turns such a string into a [Ref]. [ReadImage] and [ReadIndex] fetch
// the image (resolving multi-platform indexes to [Options.Platform]) or the
// raw top-level index; [WriteImage] and [WriteIndex] store them. [Blob] and
// [BlobRange] fetch one blob, or a byte range of it, by digest, and a
// [BlobReader] keeps what they need for a repository: ranged reads are what
// lazy chunk fetches use, so against a registry each is a single
// authenticated HTTP Range request, more only to retry a transient failure.
//
// Whole images go through go-containerregistry's remote package; blobs
// through the project's registry client, rafs/registry, so its token,
// retry and range policy is the one that applies. Both sit on the same base
// transport ([Options.Transport]).
//
// The parts are split by concern: ref.go parses references, options.go turns
// [Options] into go-containerregistry options, platform.go resolves indexes,
// oci.go, archive.go and registry.go hold the per-transport code, and
// read.go, write.go and blob.go dispatch on [Ref.Transport].
//
// Every error names the operation and the reference it was applied to.
package transport
