// Package sample is the demo's synthetic image: a small but realistic
// container image generated from a seed, and the code that writes any
// such image as an OCI image layout. It is product code because
// `damselfly demo` ships it; the conformance corpus in rafs/rafstest and
// the integration tests and benchmarks build on it, never the other way.
//
// The parts fit together like this:
//
//   - Entry, Layer and Image model an image as tar entries whose bodies are
//     generated on demand, so a large image costs no memory. Entry's
//     chained setters (Owner, Named, At, Xattr) build headers tersely;
//     Image.ImplicitDirs lists directories that no entry describes.
//   - Generate builds the sample image: a Debian-like base (binaries,
//     shared libraries, configuration, docs), a Python layer of many small
//     source files, and an application layer with a model file and a
//     whiteout. Content is pseudo-random with the compressibility of its
//     real counterpart (source text compresses about 4x, binaries about
//     2x, weights hardly), deterministic for a seed. StartupSet names the
//     files a process starting from it would read.
//   - WriteLayerTar writes one layer as a tar stream; WriteOCILayout writes
//     images into an OCI image layout, streaming each layer through gzip
//     to disk, with stable digests.
package sample
