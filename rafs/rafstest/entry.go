package rafstest

import (
	"archive/tar"
	"hash/fnv"
	"io"
	"path"
	"strings"
	"time"

	"damselfly/rafs/sample"
)

// Entry, Layer and Image are the sample package's image model: the corpus
// and the demo's generated image are written by the same code.
type (
	Entry = sample.Entry
	Layer = sample.Layer
	Image = sample.Image
)

// epoch anchors every generated timestamp. Nanoseconds are non-zero so that
// a tool that drops them is caught.
var epoch = time.Date(2021, time.March, 4, 5, 6, 7, 123456789, time.UTC)

// stamp fills the defaults of a corpus layer: PAX format (so nanosecond
// mtimes, long names, big ids and xattrs all survive) and, for entries that
// have none, an mtime derived from the layer's seed and the entry's name.
// Deriving it from the name rather than the position keeps the mtimes of
// unchanged entries equal when two versions of a layer differ elsewhere.
func stamp(seed uint64, entries ...Entry) Layer {
	l := make(Layer, len(entries))
	for i, e := range entries {
		e.Hdr.Format = tar.FormatPAX
		if e.Hdr.ModTime.IsZero() {
			e.Hdr.ModTime = mtimeFor(seed, e.Hdr.Name)
		}
		l[i] = e
	}
	return l
}

// mtimeFor returns a time within about a year after epoch, with a non-zero
// nanosecond part, that depends only on seed and name.
func mtimeFor(seed uint64, name string) time.Time {
	h := fnv.New64a()
	io.WriteString(h, strings.TrimSuffix(name, "/"))
	v := h.Sum64() ^ (seed * 0x9e3779b97f4a7c15)
	sec := int64(v>>32) % (365 * 24 * 3600)
	nsec := int64(v&0xffffffff)%999999999 + 1
	return epoch.Add(time.Duration(sec)*time.Second + time.Duration(nsec))
}

func header(typ byte, name string, mode int64) tar.Header {
	return tar.Header{Typeflag: typ, Name: name, Mode: mode}
}

// dir returns a directory entry; name gets the conventional trailing slash.
func dir(name string, mode int64) Entry {
	if !strings.HasSuffix(name, "/") {
		name += "/"
	}
	return Entry{Hdr: header(tar.TypeDir, name, mode)}
}

// file returns a regular file entry holding c.
func file(name string, mode int64, c content) Entry {
	h := header(tar.TypeReg, name, mode)
	h.Size = c.size
	e := Entry{Hdr: h}
	if c.size > 0 {
		e.Data = c.write
	}
	return e
}

// text returns a regular file entry holding s.
func text(name string, mode int64, s string) Entry {
	return file(name, mode, bytesContent([]byte(s)))
}

func symlink(name, target string) Entry {
	h := header(tar.TypeSymlink, name, 0o777)
	h.Linkname = target
	return Entry{Hdr: h}
}

func hardlink(name, target string) Entry {
	h := header(tar.TypeLink, name, 0o644)
	h.Linkname = target
	return Entry{Hdr: h}
}

// whiteout deletes p (a file or a whole directory) from the layers below.
func whiteout(p string) Entry {
	d, base := path.Split(strings.TrimSuffix(p, "/"))
	return Entry{Hdr: header(tar.TypeReg, d+".wh."+base, 0o644)}
}

// opaque hides everything the layers below hold under directory d.
func opaque(d string) Entry {
	return Entry{Hdr: header(tar.TypeReg, strings.TrimSuffix(d, "/")+"/.wh..wh..opq", 0o644)}
}

func device(typ byte, name string, mode, major, minor int64) Entry {
	h := header(typ, name, mode)
	h.Devmajor, h.Devminor = major, minor
	return Entry{Hdr: h}
}

func fifo(name string, mode int64) Entry {
	return Entry{Hdr: header(tar.TypeFifo, name, mode)}
}
