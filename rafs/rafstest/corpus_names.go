package rafstest

import (
	"fmt"
	"strings"
)

// nameLayers builds the "names" image.
func nameLayers() []Layer {
	long := fill("long-name-", 255)
	longDir := fill("long-dir-", 255)
	wide := strings.Repeat("日", 85) // 255 bytes of 3-byte runes
	es := []Entry{
		// Entries whose parents have no entry at all, and one whose parent's
		// entry only follows. Creating a directory on the fly changes the
		// mtime of the directory it is created in, so that one (here "names"
		// and the root) gets an entry afterwards to pin its mtime.
		text("implicit/a/b/c/file", 0o600, "no entry for any parent directory\n"),
		text("names/implicit-child/f", 0o644, "names/implicit-child has no entry; names has one below\n"),
		dir("names", 0o755),
		text("names/"+long, 0o644, "a 255-byte name\n"),
		dir("names/"+longDir, 0o755),
		text("names/"+longDir+"/"+long, 0o644, "255 bytes in a 255-byte directory\n"),
		text("names/"+wide, 0o644, "255 bytes of multi-byte runes\n"),
		text("names/naïve", 0o644, "latin-1 range\n"),
		dir("names/日本語", 0o755),
		text("names/日本語/ファイル.txt", 0o644, "CJK directory and file\n"),
		text("names/🐳🚀", 0o644, "emoji, 4-byte runes\n"),
		text("names/with space", 0o644, "space\n"),
		text("names/tab\there", 0o644, "tab\n"),
		text("names/new\nline", 0o644, "newline\n"),
		text("names/back\\slash", 0o644, "backslash\n"),
		text("names/-dash", 0o644, "leading dash\n"),
		text("names/*star?", 0o644, "glob characters\n"),
		text("names/...", 0o644, "three dots is an ordinary name\n"),
		text("names/.hidden", 0o644, "dot file\n"),
		text("names/foo.wh.bar", 0o644, ".wh. inside a name is not a whiteout\n"),
		dir("./dotslash", 0o750),
		text("./dotslash/file", 0o644, "names prefixed with ./\n"),
		dir("deep", 0o755),
	}
	p := "deep"
	for i := range 60 {
		p += fmt.Sprintf("/level-%02d", i)
		es = append(es, dir(p, 0o755))
	}
	es = append(es,
		text(p+"/bottom", 0o644, "sixty levels down\n"),
		// An explicit root entry, last so that it wins over the changes that
		// creating "implicit" made: its mode and mtime belong to the root.
		dir("./", 0o755),
	)
	return []Layer{stamp(51, es...)}
}

// fill repeats s until exactly n bytes long.
func fill(s string, n int) string {
	return strings.Repeat(s, n/len(s)+1)[:n]
}
