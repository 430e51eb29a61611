package rafstest

// whiteoutLayers builds the "whiteouts" image: deletions across four layers.
// Upper layers repeat the parent directory entries of what they change, as
// docker and buildkit do, so the expected parent metadata is unambiguous.
func whiteoutLayers() []Layer {
	l1 := stamp(11,
		dir("wh", 0o755),
		text("wh/keep", 0o644, "kept in every layer\n"),
		text("wh/gone", 0o644, "whited out in layer 2\n"),
		dir("wh/dir", 0o750),
		text("wh/dir/a", 0o644, "under a directory whited out in layer 2\n"),
		dir("wh/dir/sub", 0o755),
		text("wh/dir/sub/b", 0o600, "two levels under the whited-out directory\n"),
		dir("wh/opq", 0o755),
		text("wh/opq/old", 0o644, "hidden by the opaque marker in layer 2\n"),
		dir("wh/opq/olddir", 0o755),
		text("wh/opq/olddir/f", 0o644, "hidden too; the directory comes back empty of it\n"),
		dir("wh/opq3", 0o755),
		text("wh/opq3/l1", 0o644, "hidden by the opaque marker in layer 3\n"),
		text("wh/recreate", 0o644, "version 1\n"),
		dir("wh/redir", 0o755),
		text("wh/redir/old", 0o644, "must not come back with the re-created directory\n"),
		dir("wh/nested", 0o755),
		dir("wh/nested/inner", 0o711),
		dir("wh/nested/inner/deep", 0o755),
		text("wh/nested/inner/deep/f", 0o644, "deep file, whited out alone\n"),
		text("wh/nested/inner/deep/stays", 0o644, "its sibling stays\n"),
		symlink("wh/sym", "keep"),
		dir("wh/opq-late", 0o755),
		text("wh/opq-late/old", 0o644, "hidden by an opaque marker that follows a new sibling\n"),
		text("wh/hl-a", 0o644, "shared by hl-a and hl-b; hl-a is whited out\n"),
		hardlink("wh/hl-b", "wh/hl-a"),
	)
	l2 := stamp(12,
		dir("wh", 0o755),
		whiteout("wh/gone"),
		whiteout("wh/dir"),
		// The opaque marker comes first, as the image spec asks, and the
		// same layer then repopulates the directory, reusing a lower name.
		dir("wh/opq", 0o700),
		opaque("wh/opq"),
		text("wh/opq/new", 0o644, "added with the opaque marker\n"),
		dir("wh/opq/olddir", 0o750),
		text("wh/opq/olddir/nf", 0o644, "the only child of the re-created olddir\n"),
		dir("wh/opq3", 0o755),
		text("wh/opq3/l2", 0o644, "hidden by the opaque marker in layer 3\n"),
		whiteout("wh/recreate"),
		whiteout("wh/redir"),
		dir("wh/nested/inner/deep", 0o755),
		whiteout("wh/nested/inner/deep/f"),
		whiteout("wh/sym"),
		whiteout("wh/hl-a"),
		text("wh/added-l2", 0o644, "whited out in layer 3\n"),
		// The marker after a child added by the same layer: it hides only
		// what lower layers hold, wherever it appears in the layer.
		dir("wh/opq-late", 0o755),
		text("wh/opq-late/new", 0o644, "added before the opaque marker, and kept\n"),
		opaque("wh/opq-late"),
	)
	l3 := stamp(13,
		dir("wh", 0o755),
		text("wh/recreate", 0o600, "version 3, re-created after a whiteout\n").Owner(1000, 1000),
		dir("wh/redir", 0o700),
		text("wh/redir/new", 0o644, "the re-created directory's only child\n"),
		dir("wh/opq3", 0o775),
		opaque("wh/opq3"),
		text("wh/opq3/l3", 0o644, "the only survivor of wh/opq3 until layer 4\n"),
		text("wh/opq3/l3b", 0o644, "survives\n"),
		dir("wh/dir", 0o755),
		text("wh/dir/fresh", 0o644, "a directory re-created after its whiteout\n"),
		whiteout("wh/added-l2"),
	)
	l4 := stamp(14,
		dir("wh", 0o755),
		dir("wh/opq3", 0o775),
		whiteout("wh/opq3/l3"),
		text("wh/keep", 0o644, "kept, rewritten in layer 4\n"),
		// A whiteout of a path that no layer below holds is a no-op.
		whiteout("wh/never-existed"),
	)
	return []Layer{l1, l2, l3, l4}
}
