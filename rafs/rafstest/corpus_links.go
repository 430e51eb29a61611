package rafstest

import "strings"

// hardlinkLayers builds the "hardlinks" image.
func hardlinkLayers() []Layer {
	l1 := stamp(31,
		dir("hl", 0o755),
		text("hl/g1", 0o640, "one inode, three names\n").Owner(1000, 100),
		hardlink("hl/g2", "hl/g1"),
		hardlink("hl/g3", "hl/g1"),
		text("hl/lower", 0o755, "linked to from layer 2\n"),
		dir("hl/other", 0o755),
		hardlink("hl/other/cross-dir", "hl/lower"),
		symlink("hl/sym", "g1"),
		hardlink("hl/sym-link", "hl/sym"),
		text("hl/split-a", 0o644, "rewritten in layer 2, which splits the pair\n"),
		hardlink("hl/split-b", "hl/split-a"),
		file("hl/empty", 0o644, bytesContent(nil)),
		hardlink("hl/empty-link", "hl/empty"),
	)
	l2 := stamp(32,
		dir("hl", 0o755),
		hardlink("hl/up-link", "hl/lower"),
		text("hl/split-a", 0o644, "a new inode for split-a\n"),
		dir("hl/d2", 0o755),
		hardlink("hl/d2/g4", "hl/g1"),
	)
	return []Layer{l1, l2}
}

// symlinkLayers builds the "symlinks" image.
func symlinkLayers() []Layer {
	long := strings.Repeat("long-target/", 341) + "abc" // 4095 bytes, Linux's limit
	l1 := stamp(41,
		dir("sym", 0o755),
		text("sym/target-file", 0o644, "pointed at\n"),
		dir("sym/target-dir", 0o755),
		text("sym/target-dir/child", 0o644, "child\n"),
		symlink("sym/abs", "/etc/passwd"),
		symlink("sym/abs-dir", "/usr/lib"),
		symlink("sym/rel", "target-file"),
		symlink("sym/rel-up", "../sym/target-dir/child"),
		symlink("sym/dangling", "does/not/exist"),
		symlink("sym/to-dir", "target-dir"),
		symlink("sym/dot", "."),
		symlink("sym/loop-a", "loop-b"),
		symlink("sym/loop-b", "loop-a"),
		symlink("sym/self", "self"),
		symlink("sym/long", long),
		symlink("sym/unicode", "日本語/naïve"),
		symlink("sym/owned", "target-file").Owner(1000, 1000),
		symlink("sym/becomes-file", "target-file"),
	)
	l2 := stamp(42,
		dir("sym", 0o755),
		text("sym/becomes-file", 0o644, "was a symlink; the target must be untouched\n"),
		symlink("sym/rel", "target-dir"),
	)
	return []Layer{l1, l2}
}
