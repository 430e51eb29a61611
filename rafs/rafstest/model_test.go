package rafstest

import (
	"archive/tar"
	"path"
	"strings"
)

// modelEntry is what the layer semantics of the image spec say a path of
// the final tree holds: the header that created it (for a hardlink, its
// target's) and the entry, whose Data gives the expected bytes.
type modelEntry struct {
	hdr   tar.Header
	entry Entry
}

// model applies img's layers to an empty tree by the rules of the OCI image
// spec, using nothing but the entries' headers. It is the independent oracle
// that umoci's output is checked against.
func model(img Image) map[string]modelEntry {
	m := map[string]modelEntry{}
	removeTree := func(p string) {
		for k := range m {
			if k == p || strings.HasPrefix(k, p+"/") {
				delete(m, k)
			}
		}
	}
	for _, l := range img.Layers {
		added := map[string]bool{}
		for _, e := range l {
			p := cleanName(e.Hdr.Name)
			d, base := path.Split(p)
			d = path.Clean(d)
			switch {
			case base == ".wh..wh..opq":
				for k := range m {
					if strings.HasPrefix(k, d+"/") && !added[k] {
						delete(m, k)
					}
				}
				continue
			case strings.HasPrefix(base, ".wh."):
				removeTree(path.Join(d, strings.TrimPrefix(base, ".wh.")))
				continue
			}
			if old, ok := m[p]; ok && (old.hdr.Typeflag != tar.TypeDir || e.Hdr.Typeflag != tar.TypeDir) {
				removeTree(p)
			}
			me := modelEntry{hdr: e.Hdr, entry: e}
			if e.Hdr.Typeflag == tar.TypeLink {
				me = m[cleanName(e.Hdr.Linkname)]
			}
			m[p] = me
			added[p] = true
		}
	}
	return m
}
