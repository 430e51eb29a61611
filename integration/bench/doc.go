// Package bench is the benchmark harness for the RAFS converter. It builds
// the images the benchmarks convert (a real Python/NumPy/SciPy image made
// from Debian packages, and synthetic sample images of a chosen size, all
// as gzip OCI layouts cached under one directory), runs the converters as
// child processes so that wall time and peak RSS are measured the same way
// for each, checks chunk deduplication across an image pair through the
// bootstrap, and reports the results as a markdown table and JSON.
//
// The programs below it are thin: convert is the harness that
// `make bench-convert` runs, images only builds the images, and estargz is
// the eStargz baseline converter that the harness measures side by side.
// mount (`make bench-mount`) measures the mount daemon against a pull and
// unpack through a shaped link, and distribution (`make
// bench-distribution`) N peer daemons pulling one image at once, with and
// without P2P, in one process; deployed (`make bench-deployed`) the same
// question with separate scheduler, peer and mount daemon processes, each
// node in its own network namespace behind a tc-capped link, reading
// through FUSE. The startup sets the mount and deployed harnesses read
// are here (startup.go). `make bench` runs them all and rewrites
// RESULTS.md from their JSON.
package bench
