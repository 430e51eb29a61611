package rafstest

// DefaultChunkSize is the chunk size the corpus aims its edge-case file sizes
// at when CorpusOptions.ChunkSize is zero. It matches rafs.DefaultChunkSize.
const DefaultChunkSize = 1 << 20

// CorpusOptions selects what Corpus generates.
type CorpusOptions struct {
	// ChunkSize is the converter's chunk size; files of exactly N chunks and
	// one byte either side are generated around it. Zero means
	// DefaultChunkSize.
	ChunkSize int
	// Large adds the "large" image: a 100 MiB file of mixed content, a
	// 100 MiB all-zero file and 50,000 small files (up to 1.5 KiB, one in
	// ten a copy of another). Its layout takes some 80 MB and a few seconds
	// to write, and 250 MB unpacked; the default corpus's layout is about
	// 30 MB at the default chunk size.
	Large bool
}

// Corpus returns the conformance images. The same options always give the
// same images, entry for entry and byte for byte, so written layers have
// stable digests. The images, bottom layer first:
//
//   - "whiteouts": four layers of file, directory, symlink and hardlink
//     whiteouts, opaque directories (one repopulated in the same layer, one
//     hiding two lower layers), deletion then re-creation of a file and of a
//     directory, and a whiteout of a file deep in a directory that stays.
//   - "replace": a directory replaced by a file, a file by a directory, and
//     back again; symlink to file and file to symlink; the whiteout-then-add
//     form of a replacement.
//   - "hardlinks": a group of three names, links across directories, a link
//     in an upper layer to a lower layer's file, a link to a symlink, and a
//     group split when an upper layer rewrites one of its names.
//   - "symlinks": absolute, relative, dangling, looping, 4095-byte and
//     unicode targets; a symlink later replaced by a file.
//   - "names": 255-byte names (ASCII and multi-byte), a 60-level path,
//     unicode, spaces, tabs, newlines, "..." and "foo.wh.bar" names, entries
//     whose parent directories are implicit, "./"-prefixed entries and an
//     explicit root entry.
//   - "sizes": empty, one byte, N chunks and one byte either side, all-zero
//     files, a file whose chunks repeat, and identical files.
//   - "meta": setuid, setgid and sticky bits, unusual modes including 0000
//     and a read-only directory with children, many owners (up to 32-bit
//     ids), xattrs (user.* and trusted.*, empty and binary values, on a
//     directory and on a symlink), and mtimes before 1970 and after 2038.
//   - "devices": character and block devices (including a major and minor
//     above 255) and fifos.
//   - "base-v1" and "base-v2": a shared, byte-identical base layer and an
//     upper layer that v2 changes slightly (one file's content, one chunk in
//     the middle of a binary, one file added, one removed, one base file
//     whited out).
//   - "large" (only with Large): see CorpusOptions.Large.
func Corpus(opts CorpusOptions) []Image {
	cs := opts.ChunkSize
	if cs <= 0 {
		cs = DefaultChunkSize
	}
	base := baseLayer(cs)
	imgs := []Image{
		{Name: "whiteouts", Layers: whiteoutLayers()},
		{Name: "replace", Layers: replaceLayers()},
		{Name: "hardlinks", Layers: hardlinkLayers()},
		{Name: "symlinks", Layers: symlinkLayers()},
		{Name: "names", Layers: nameLayers()},
		{Name: "sizes", Layers: sizeLayers(cs)},
		{Name: "meta", Layers: metaLayers()},
		{Name: "devices", Layers: deviceLayers()},
		{Name: "base-v1", Layers: []Layer{base, appLayer(cs, 1)}},
		{Name: "base-v2", Layers: []Layer{base, appLayer(cs, 2)}},
	}
	if opts.Large {
		imgs = append(imgs, Image{Name: "large", Layers: largeLayers()})
	}
	return imgs
}
