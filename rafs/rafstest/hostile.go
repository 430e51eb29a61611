package rafstest

// HostileLayers returns malformed or malicious layers, by name, for bad-input
// tests. None is part of Corpus. A converter or unpacker must never write
// outside its destination; it may reject a layer with a clear error or, for
// paths, confine them to the root as umoci 0.4.7 does (it resolves "..",
// absolute paths and symlinks as if the root were "/"). What umoci does with
// each is noted:
//
//   - "dotdot": an entry "../escape" (umoci: written as "escape").
//   - "dotdot-nested": an entry "ok/../../escape" that only escapes once
//     cleaned (umoci: "escape").
//   - "absolute": an entry "/etc/x" (umoci: "etc/x", parent created).
//   - "hardlink-missing": a hardlink to a path no entry created (umoci:
//     error, no such file).
//   - "hardlink-escape": a hardlink whose target is "../../etc/passwd"
//     (umoci: error, since "etc/passwd" is not in the root).
//   - "hardlink-dir": a hardlink to a directory (umoci: error, EPERM).
//   - "symlink-escape": symlink "evil" -> "../../.." and then a file
//     "evil/x" that a naive extractor writes through the symlink (umoci:
//     "x" in the root).
//   - "symlink-abs-escape": the same through "abs" -> "/tmp" (umoci:
//     "tmp/x" in the root).
//   - "truncated": a regular file whose header claims 1 TiB and whose body
//     stops after 1000 bytes, at the end of the stream (umoci: error,
//     unexpected EOF).
//
// Each call returns fresh layers; callers may modify them.
func HostileLayers() map[string]Layer {
	truncated := file("huge", 0o644, randomContent(666, 1000))
	truncated.Hdr.Size = 1 << 40
	truncated.Truncate = true
	return map[string]Layer{
		"dotdot": stamp(1,
			dir("ok", 0o755),
			text("../escape", 0o644, "outside the root\n"),
		),
		"dotdot-nested": stamp(2,
			dir("ok", 0o755),
			text("ok/../../escape", 0o644, "outside the root once cleaned\n"),
		),
		"absolute": stamp(3,
			text("/etc/x", 0o644, "absolute path\n"),
		),
		"hardlink-missing": stamp(4,
			text("present", 0o644, "present\n"),
			hardlink("link", "no/such/file"),
		),
		"hardlink-escape": stamp(5,
			hardlink("passwd", "../../etc/passwd"),
		),
		"hardlink-dir": stamp(6,
			dir("d", 0o755),
			hardlink("l", "d"),
		),
		"symlink-escape": stamp(7,
			symlink("evil", "../../.."),
			text("evil/x", 0o644, "written through a symlink\n"),
		),
		"symlink-abs-escape": stamp(8,
			symlink("abs", "/tmp"),
			text("abs/x", 0o644, "written through an absolute symlink\n"),
		),
		"truncated": stamp(9,
			dir("d", 0o755),
			truncated,
			text("never-written", 0o644, "after the truncated entry\n"),
		),
	}
}
