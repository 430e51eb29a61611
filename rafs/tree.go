package rafs

import (
	"archive/tar"
	"fmt"
	"path"
	"sort"
	"strings"
)

// tree is the merged file tree of an image while it is being built: layers
// are applied bottom to top, with OCI whiteouts resolved as they come.
type tree struct {
	root *node
}

type node struct {
	name     string
	parent   *node
	children map[string]*node // directories only
	in       *inode
	layer    int // layer that created this node; opaque dirs drop lower ones
}

// inode is the metadata of one file; hardlinked names share one.
type inode struct {
	mode      uint32
	uid, gid  uint32
	mtimeSec  int64
	mtimeNsec uint32
	size      uint64
	major     uint32
	minor     uint32
	target    string
	xattrs    []Xattr
	pieces    []uint32 // regular files: sequence numbers of the file's chunks, resolved to chunk indexes at encode
	batchOff  uint32   // a small file batched with others: its offset in its one chunk

	ino   Ino    // assigned at encode
	nlink uint32 // counted at encode
}

func newTree() *tree {
	return &tree{root: &node{children: map[string]*node{}, in: &inode{mode: ModeDir | 0o755}, layer: -1}}
}

const (
	whiteoutPrefix = ".wh."
	opaqueMarker   = ".wh..wh..opq"
	symlinkHops    = 40
)

// cleanEntryPath turns a tar entry name into components relative to the
// root, refusing anything that is absolute or climbs out of the root.
func cleanEntryPath(name string) ([]string, error) {
	if strings.HasPrefix(name, "/") {
		return nil, fmt.Errorf("absolute path %q", name)
	}
	if strings.IndexByte(name, 0) >= 0 {
		return nil, fmt.Errorf("path %q contains NUL", name)
	}
	var parts []string
	for _, p := range strings.Split(name, "/") {
		switch p {
		case "", ".":
			continue
		case "..":
			return nil, fmt.Errorf("path %q leaves the root", name)
		}
		if len(p) > MaxNameLen {
			return nil, fmt.Errorf("path %q: component longer than %d bytes", name, MaxNameLen)
		}
		parts = append(parts, p)
	}
	if len(parts) > MaxPathDepth {
		return nil, fmt.Errorf("path %q deeper than %d", name, MaxPathDepth)
	}
	return parts, nil
}

// resolveDir walks parts from the root and returns the directory they name,
// following symlinks met on the way the way an unpacker that stays inside
// the root does (an absolute or climbing target is clamped at the root).
// Missing directories are created when create is set, as tar extractors do
// for implicit parents.
func (t *tree) resolveDir(parts []string, layer int, create bool) (*node, error) {
	hops := 0
	return t.walk(t.root, parts, layer, create, &hops)
}

func (t *tree) walk(dir *node, parts []string, layer int, create bool, hops *int) (*node, error) {
	for _, p := range parts {
		if p == ".." {
			if dir.parent != nil {
				dir = dir.parent
			}
			continue
		}
		if p == "" || p == "." {
			continue
		}
		c := dir.children[p]
		if c == nil {
			if !create {
				return nil, fmt.Errorf("%q does not exist", p)
			}
			c = &node{name: p, parent: dir, children: map[string]*node{}, layer: layer,
				in: &inode{mode: ModeDir | 0o755}}
			dir.children[p] = c
		}
		if c.in.mode&ModeType == ModeLink {
			if *hops++; *hops > symlinkHops {
				return nil, fmt.Errorf("too many levels of symbolic links at %q", p)
			}
			start := dir
			target := c.in.target
			if strings.HasPrefix(target, "/") {
				start = t.root
			}
			var err error
			c, err = t.walk(start, strings.Split(target, "/"), layer, create, hops)
			if err != nil {
				return nil, err
			}
		}
		if c.in.mode&ModeType != ModeDir {
			return nil, fmt.Errorf("%q is not a directory", p)
		}
		dir = c
	}
	return dir, nil
}

// lookupNoFollow finds the node at parts, following symlinks only in the
// parent components.
func (t *tree) lookupNoFollow(parts []string, layer int) (*node, error) {
	if len(parts) == 0 {
		return t.root, nil
	}
	dir, err := t.resolveDir(parts[:len(parts)-1], layer, false)
	if err != nil {
		return nil, err
	}
	c := dir.children[parts[len(parts)-1]]
	if c == nil {
		return nil, fmt.Errorf("%q does not exist", parts[len(parts)-1])
	}
	return c, nil
}

// headerInode converts a tar header's metadata.
func headerInode(h *tar.Header) (*inode, error) {
	in := &inode{
		mode:      uint32(h.Mode) & ModePerm,
		uid:       uint32(h.Uid),
		gid:       uint32(h.Gid),
		mtimeSec:  h.ModTime.Unix(),
		mtimeNsec: uint32(h.ModTime.Nanosecond()),
	}
	if h.Uid < 0 || h.Gid < 0 || h.Uid > 1<<32-1 || h.Gid > 1<<32-1 {
		return nil, fmt.Errorf("uid/gid %d/%d out of range", h.Uid, h.Gid)
	}
	switch h.Typeflag {
	case tar.TypeReg, tar.TypeRegA:
		in.mode |= ModeReg
		if h.Size < 0 {
			return nil, fmt.Errorf("negative size %d", h.Size)
		}
		in.size = uint64(h.Size)
	case tar.TypeDir:
		in.mode |= ModeDir
	case tar.TypeSymlink:
		in.mode |= ModeLink
		if h.Linkname == "" || len(h.Linkname) > MaxSymlinkLen || strings.IndexByte(h.Linkname, 0) >= 0 {
			return nil, fmt.Errorf("invalid symlink target of %d bytes", len(h.Linkname))
		}
		in.target = h.Linkname
		in.size = uint64(len(h.Linkname))
	case tar.TypeChar, tar.TypeBlock:
		if h.Typeflag == tar.TypeChar {
			in.mode |= ModeChr
		} else {
			in.mode |= ModeBlk
		}
		if h.Devmajor < 0 || h.Devminor < 0 || h.Devmajor > 1<<32-1 || h.Devminor > 1<<32-1 {
			return nil, fmt.Errorf("device number %d:%d out of range", h.Devmajor, h.Devminor)
		}
		in.major, in.minor = uint32(h.Devmajor), uint32(h.Devminor)
	case tar.TypeFifo:
		in.mode |= ModeFifo
	default:
		return nil, fmt.Errorf("unsupported tar entry type %q", h.Typeflag)
	}
	var err error
	if in.xattrs, err = headerXattrs(h); err != nil {
		return nil, err
	}
	return in, nil
}

const paxXattr = "SCHILY.xattr."

func headerXattrs(h *tar.Header) ([]Xattr, error) {
	var xs []Xattr
	for k, v := range h.PAXRecords {
		if !strings.HasPrefix(k, paxXattr) {
			continue
		}
		name := k[len(paxXattr):]
		if v == "" {
			// In PAX an empty value unsets the key; umoci and tar do
			// not create such an xattr either.
			continue
		}
		if name == "" || len(name) > MaxXattrNameLen || len(v) > MaxXattrValueLen || strings.IndexByte(name, 0) >= 0 {
			return nil, fmt.Errorf("invalid xattr %q (%d bytes)", name, len(v))
		}
		xs = append(xs, Xattr{Name: name, Value: []byte(v)})
	}
	if len(xs) > MaxXattrsPerNode {
		return nil, fmt.Errorf("%d xattrs exceeds the limit %d", len(xs), MaxXattrsPerNode)
	}
	sort.Slice(xs, func(i, j int) bool { return xs[i].Name < xs[j].Name })
	return xs, nil
}

// apply merges one tar entry of layer into the tree. For a regular file the
// returned inode is the one whose pieces the caller fills with its content.
func (t *tree) apply(layer int, h *tar.Header) (*inode, error) {
	parts, err := cleanEntryPath(h.Name)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 { // the root itself
		if h.Typeflag != tar.TypeDir {
			return nil, fmt.Errorf("root entry is not a directory")
		}
		in, err := headerInode(h)
		if err != nil {
			return nil, err
		}
		t.root.in = in
		return nil, nil
	}
	base := parts[len(parts)-1]
	dir, err := t.resolveDir(parts[:len(parts)-1], layer, true)
	if err != nil {
		return nil, fmt.Errorf("parent of %q: %w", h.Name, err)
	}

	if strings.HasPrefix(base, whiteoutPrefix) {
		switch {
		case base == opaqueMarker:
			dropLower(dir, layer)
		case strings.HasPrefix(base, whiteoutPrefix+whiteoutPrefix):
			// Other AUFS metadata (.wh..wh.plnk and friends): not part of the tree.
		default:
			victim := base[len(whiteoutPrefix):]
			if !validName(victim) {
				return nil, fmt.Errorf("whiteout %q names no valid file", h.Name)
			}
			if c := dir.children[victim]; c != nil && c.layer < layer {
				delete(dir.children, victim)
			}
		}
		return nil, nil
	}

	if h.Typeflag == tar.TypeLink {
		tparts, err := cleanEntryPath(h.Linkname)
		if err != nil {
			return nil, fmt.Errorf("hardlink %q: target: %w", h.Name, err)
		}
		target, err := t.lookupNoFollow(tparts, layer)
		if err != nil {
			return nil, fmt.Errorf("hardlink %q to %q: %w", h.Name, h.Linkname, err)
		}
		if target.in.mode&ModeType == ModeDir {
			return nil, fmt.Errorf("hardlink %q to directory %q", h.Name, h.Linkname)
		}
		if old := dir.children[base]; old != nil && old.in == target.in {
			return nil, nil
		}
		dir.children[base] = &node{name: base, parent: dir, in: target.in, layer: layer}
		return nil, nil
	}

	in, err := headerInode(h)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", h.Name, err)
	}
	old := dir.children[base]
	if in.mode&ModeType == ModeDir && old != nil && old.in.mode&ModeType == ModeDir {
		// A directory entry over a directory updates its metadata and keeps
		// its children.
		old.in = in
		old.layer = layer
		return nil, nil
	}
	n := &node{name: base, parent: dir, in: in, layer: layer}
	if in.mode&ModeType == ModeDir {
		n.children = map[string]*node{}
	}
	dir.children[base] = n
	if in.mode&ModeType == ModeReg {
		return in, nil
	}
	return nil, nil
}

// dropLower hides what lower layers put in dir, as an opaque directory
// does. A lower directory that this layer has put entries in stays, holding
// only those entries, as it would in an overlay upper directory.
func dropLower(dir *node, layer int) {
	for name, c := range dir.children {
		if c.layer >= layer {
			continue
		}
		if c.children != nil {
			dropLower(c, layer)
			if len(c.children) > 0 {
				continue
			}
		}
		delete(dir.children, name)
	}
}

// sortedChildren returns a directory's children ordered by name bytes.
func (n *node) sortedChildren() []*node {
	out := make([]*node, 0, len(n.children))
	for _, c := range n.children {
		out = append(out, c)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].name < out[j].name })
	return out
}

// pathOf gives a node's slash path from the root, for messages and
// prefetch matching.
func (n *node) pathOf() string {
	if n.parent == nil {
		return "/"
	}
	var parts []string
	for ; n.parent != nil; n = n.parent {
		parts = append(parts, n.name)
	}
	for i, j := 0, len(parts)-1; i < j; i, j = i+1, j-1 {
		parts[i], parts[j] = parts[j], parts[i]
	}
	return path.Join(append([]string{"/"}, parts...)...)
}
