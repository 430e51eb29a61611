package rafstest

// replaceLayers builds the "replace" image: paths that change type between
// layers without a whiteout (the upper entry simply replaces), plus one
// replacement written docker-style as a whiteout followed by the new entry.
func replaceLayers() []Layer {
	l1 := stamp(21,
		dir("rp", 0o755),
		dir("rp/d2f", 0o755),
		text("rp/d2f/child", 0o644, "lost when rp/d2f becomes a file\n"),
		dir("rp/d2f/sub", 0o755),
		text("rp/d2f/sub/x", 0o644, "lost too\n"),
		text("rp/f2d", 0o644, "a file, then a directory, then a file again\n"),
		dir("rp/flip", 0o750),
		text("rp/flip/c", 0o644, "lost when rp/flip becomes a file\n"),
		symlink("rp/s2f", "d2f"),
		text("rp/f2s", 0o644, "becomes a symlink\n"),
		dir("rp/wd2f", 0o755),
		text("rp/wd2f/child", 0o644, "whited out with its directory\n"),
	)
	l2 := stamp(22,
		dir("rp", 0o755),
		text("rp/d2f", 0o640, "was a directory\n"),
		dir("rp/f2d", 0o711),
		text("rp/f2d/child", 0o644, "lost when rp/f2d becomes a file again\n"),
		text("rp/flip", 0o600, "a directory, now a file\n"),
		text("rp/s2f", 0o644, "was a symlink\n"),
		symlink("rp/f2s", "f2d"),
		whiteout("rp/wd2f"),
		text("rp/wd2f", 0o644, "was a directory, replaced docker-style\n"),
	)
	l3 := stamp(23,
		dir("rp", 0o755),
		text("rp/f2d", 0o755, "a file again\n"),
		dir("rp/flip", 0o755),
		text("rp/flip/again", 0o644, "the old rp/flip/c must not come back\n"),
		dir("rp/d2f", 0o700),
		text("rp/d2f/new", 0o644, "only child of the directory again\n"),
	)
	return []Layer{l1, l2, l3}
}
