package rafstest

// sizeLayers builds the "sizes" image: file sizes at chunk boundaries.
func sizeLayers(cs int) []Layer {
	c := int64(cs)
	l := stamp(61,
		dir("sizes", 0o755),
		file("sizes/empty", 0o644, bytesContent(nil)),
		file("sizes/one-byte", 0o644, bytesContent([]byte{'x'})),
		file("sizes/chunk-minus-1", 0o644, randomContent(601, c-1)),
		file("sizes/chunk", 0o644, randomContent(602, c)),
		file("sizes/chunk-plus-1", 0o644, randomContent(603, c+1)),
		file("sizes/2chunks", 0o644, randomContent(604, 2*c)),
		file("sizes/3chunks-minus-1", 0o644, randomContent(605, 3*c-1)),
		file("sizes/3chunks-plus-1", 0o644, randomContent(606, 3*c+1)),
		file("sizes/zeros", 0o644, zeroContent(2*c+7)),
		file("sizes/zeros-2chunks", 0o644, zeroContent(2*c)),
		// Chunks A B A A B 0 A and a tail: three distinct chunks of seven.
		file("sizes/repeating", 0o644, chunkContent(cs, []uint64{607, 608, 607, 607, 608, 0, 607}, 609, 100)),
		// The same bytes as sizes/chunk: whole-file dedup.
		file("sizes/copy-of-chunk", 0o644, randomContent(602, c)),
		// Starts like sizes/3chunks-plus-1 but is shorter: dedup of a prefix.
		file("sizes/prefix-of-3chunks", 0o644, randomContent(606, c+c/2)),
	)
	return []Layer{l}
}
