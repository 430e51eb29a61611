// Package rafstest holds damselfly's conformance corpus and the tools to
// judge an unpacked image against a reference.
//
// The parts fit together like this:
//
//   - Corpus builds, deterministically, a set of small OCI images whose
//     layers exercise every corner of layer semantics that a converter or
//     unpacker can get wrong: whiteouts and opaque directories over several
//     layers, type changes, hardlinks across layers, odd names, chunk-edge
//     file sizes, xattrs, special mode bits, owners, nanosecond mtimes and
//     device nodes. HostileLayers holds malformed layers for bad-input tests.
//   - Entry, Layer and Image are rafs/sample's image model, shared with the
//     demo's generated image. WriteOCILayout writes images to an OCI image
//     layout directory, streaming each layer through gzip to disk;
//     WriteLayerTar writes one raw layer tar (both call rafs/sample).
//   - UmociUnpack runs the reference unpacker, umoci, and CompareTrees reports
//     every difference between its output and another unpacked tree.
//     Image.ImplicitDirs lists the directories whose mtimes no entry sets,
//     for CompareOptions.IgnoreMtime.
//
// A typical conformance test writes Corpus(opts) to a layout, unpacks every
// image with umoci and with the code under test, and requires
//
//	CompareTreesWith(umociRoot, ourRoot, CompareOptions{IgnoreMtime: img.ImplicitDirs()})
//
// to return nothing. What umoci restores, and so what CompareTrees checks, is
// described on CompareTreesWith. The package's own tests check umoci's output
// for every corpus path against the layer semantics of the image spec.
package rafstest
