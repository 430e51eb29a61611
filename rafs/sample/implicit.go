package sample

import (
	"archive/tar"
	"path"
	"sort"
	"strings"
)

// cleanName turns a tar entry name into the slash-separated path relative to
// the root that CompareOptions uses: "./a/b/" becomes "a/b", "./" becomes ".".
func cleanName(name string) string {
	return path.Clean(strings.TrimPrefix(name, "./"))
}

// ImplicitDirs returns, sorted, the directories of img that no entry of any
// layer describes: parents created on the fly for deeper entries, and the
// root "." unless some layer has a "./" entry. Their mtimes are whatever the
// unpacker chooses (umoci: the time of unpacking; the root without an entry:
// the epoch), so pass them as CompareOptions.IgnoreMtime.
func (img Image) ImplicitDirs() []string {
	explicit := map[string]bool{}
	parents := map[string]bool{".": true}
	for _, l := range img.Layers {
		for i := range l {
			p := cleanName(l[i].Hdr.Name)
			if l[i].Hdr.Typeflag == tar.TypeDir {
				explicit[p] = true
			}
			for d := path.Dir(p); d != "." && !parents[d]; d = path.Dir(d) {
				parents[d] = true
			}
		}
	}
	var out []string
	for d := range parents {
		if !explicit[d] {
			out = append(out, d)
		}
	}
	sort.Strings(out)
	return out
}
