package rafstest

import (
	"fmt"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// MaxReported caps the differences CompareTrees lists; one more line then
// gives the count of the rest.
const MaxReported = 50

// CompareOptions relaxes CompareTreesWith.
type CompareOptions struct {
	// IgnoreMtime lists paths, slash-separated and relative to the roots
	// ("." is the root itself), whose mtimes are not compared. Pass
	// Image.ImplicitDirs: umoci gives directories that no tar entry
	// describes the time of unpacking.
	IgnoreMtime []string
}

// CompareTrees reports every difference between two unpacked root
// filesystems, want (normally umoci's) and got; none means equal. It is
// CompareTreesWith with no options.
func CompareTrees(want, got string) []string {
	return CompareTreesWith(want, got, CompareOptions{})
}

// CompareTreesWith reports every difference between the trees at want and
// got, as lines like "a/b: mode got 0755 want 0644", sorted by path and
// capped at MaxReported lines plus a count. Symlinks are never followed.
//
// For every path both trees must hold it with the same file type, the full
// permission bits (setuid, setgid and sticky included), uid, gid and mtime to
// the nanosecond; and, by type, the same bytes (regular files, compared
// streaming), symlink target, device major and minor, and link count (every
// non-directory). Xattrs must match by name and value, except security.*
// and system.* ones, which the host adds. Paths that share an inode must
// form the same groups in both trees; inode numbers themselves are not
// compared, nor are atime, ctime, directory sizes and directory link counts,
// which depend on the filesystem.
//
// What umoci 0.4.7, run as root, restores, and so what want holds: mode
// bits including setuid, setgid and sticky; numeric uid and gid (names are
// ignored); mtimes with nanoseconds on every type, symlinks and directories
// included; every SCHILY.xattr record with a non-empty value, trusted.* too
// and on symlinks too (an empty value is, by PAX rules, no value, and Go's
// tar reader drops it); device numbers; hardlinks, also to files of lower
// layers and to symlinks. Whiteouts and opaque markers follow the image
// spec: a marker hides only what lower layers hold, even when it follows a
// sibling its own layer added, and a whiteout of a path that does not exist
// is a no-op. A non-directory entry replaces whatever is at its path, a
// whole directory tree included, without needing a whiteout. After creating, replacing or whiting out a child, umoci restores
// the parent directory's metadata, so directory mtimes survive later
// entries and later layers. Directories it creates for entries whose
// parents have no entry get mode 0777 minus the umask, owner 0:0 and the
// time of unpacking as mtime, and the directory in which such a directory
// is created also gets the time of unpacking, unless an entry for it
// follows. The root takes its metadata from a "./" entry if the image has
// one; otherwise its mode is 0777 minus the umask and its mtime the epoch.
func CompareTreesWith(want, got string, opts CompareOptions) []string {
	wt, err := scanTree(want)
	if err != nil {
		return []string{fmt.Sprintf("want tree: %v", err)}
	}
	gt, err := scanTree(got)
	if err != nil {
		return []string{fmt.Sprintf("got tree: %v", err)}
	}
	c := &comparer{want: want, got: got, wt: wt, gt: gt, noMtime: map[string]bool{}}
	for _, p := range opts.IgnoreMtime {
		c.noMtime[p] = true
	}
	c.run()
	if len(c.diffs) > MaxReported {
		more := len(c.diffs) - MaxReported
		c.diffs = append(c.diffs[:MaxReported], fmt.Sprintf("... and %d more differences", more))
	}
	return c.diffs
}

type comparer struct {
	want, got string
	wt, gt    tree
	noMtime   map[string]bool
	diffs     []string
}

func (c *comparer) add(p, format string, args ...any) {
	c.diffs = append(c.diffs, showPath(p)+": "+fmt.Sprintf(format, args...))
}

// showPath quotes a path that holds control characters, such as a newline,
// so that every difference stays on one line.
func showPath(p string) string {
	if strings.IndexFunc(p, func(r rune) bool { return r < 0x20 || r == 0x7f }) >= 0 {
		return strconv.Quote(p)
	}
	return p
}

func (c *comparer) run() {
	paths := make([]string, 0, len(c.wt))
	for p := range c.wt {
		paths = append(paths, p)
	}
	for p := range c.gt {
		if c.wt[p] == nil {
			paths = append(paths, p)
		}
	}
	sort.Strings(paths)
	wg, gg := inodeGroups(c.wt), inodeGroups(c.gt)
	reported := map[string]bool{}
	for _, p := range paths {
		w, g := c.wt[p], c.gt[p]
		switch {
		case g == nil:
			c.add(p, "missing (want %s)", typeName(w.st.Mode))
			continue
		case w == nil:
			c.add(p, "unexpected %s", typeName(g.st.Mode))
			continue
		}
		if !c.compareNode(p, w, g) || reported[p] {
			continue
		}
		if want, got := wg[p], gg[p]; !slices.Equal(want, got) {
			c.add(p, "hardlink group got %s want %s", groupString(p, got), groupString(p, want))
			for _, q := range append(want, got...) {
				reported[q] = true
			}
		}
	}
}

// compareNode reports differences of one path present in both trees and
// says whether the types matched, so that finer checks make sense.
func (c *comparer) compareNode(p string, w, g *node) bool {
	wm, gm := w.st.Mode, g.st.Mode
	if wm&unix.S_IFMT != gm&unix.S_IFMT {
		c.add(p, "type got %s want %s", typeName(gm), typeName(wm))
		return false
	}
	if wm&0o7777 != gm&0o7777 {
		c.add(p, "mode got %04o want %04o", gm&0o7777, wm&0o7777)
	}
	if w.st.Uid != g.st.Uid || w.st.Gid != g.st.Gid {
		c.add(p, "owner got %d:%d want %d:%d", g.st.Uid, g.st.Gid, w.st.Uid, w.st.Gid)
	}
	if !c.noMtime[p] && w.st.Mtim != g.st.Mtim {
		c.add(p, "mtime got %s want %s", timeString(g.st.Mtim), timeString(w.st.Mtim))
	}
	c.compareXattrs(p, w.xattrs, g.xattrs)
	isDir := wm&unix.S_IFMT == unix.S_IFDIR
	if !isDir && w.st.Nlink != g.st.Nlink {
		c.add(p, "link count got %d want %d", g.st.Nlink, w.st.Nlink)
	}
	switch wm & unix.S_IFMT {
	case unix.S_IFLNK:
		if w.target != g.target {
			c.add(p, "symlink target got %q want %q", g.target, w.target)
		}
	case unix.S_IFCHR, unix.S_IFBLK:
		if w.st.Rdev != g.st.Rdev {
			c.add(p, "device got %d:%d want %d:%d",
				unix.Major(g.st.Rdev), unix.Minor(g.st.Rdev), unix.Major(w.st.Rdev), unix.Minor(w.st.Rdev))
		}
	case unix.S_IFREG:
		if w.st.Size != g.st.Size {
			c.add(p, "size got %d want %d", g.st.Size, w.st.Size)
			break
		}
		off, err := sameContent(c.abs(c.want, p), c.abs(c.got, p))
		switch {
		case err != nil:
			c.add(p, "compare content: %v", err)
		case off >= 0:
			c.add(p, "content differs from byte %d", off)
		}
	}
	return true
}

func (c *comparer) compareXattrs(p string, w, g map[string]string) {
	names := make([]string, 0, len(w)+len(g))
	for k := range w {
		names = append(names, k)
	}
	for k := range g {
		if _, ok := w[k]; !ok {
			names = append(names, k)
		}
	}
	sort.Strings(names)
	for _, k := range names {
		wv, wok := w[k]
		gv, gok := g[k]
		switch {
		case !gok:
			c.add(p, "xattr %s missing (want %q)", k, wv)
		case !wok:
			c.add(p, "unexpected xattr %s=%q", k, gv)
		case wv != gv:
			c.add(p, "xattr %s got %q want %q", k, gv, wv)
		}
	}
}

func (c *comparer) abs(root, p string) string {
	return filepath.Join(root, filepath.FromSlash(p))
}

func typeName(mode uint32) string {
	switch mode & unix.S_IFMT {
	case unix.S_IFREG:
		return "regular file"
	case unix.S_IFDIR:
		return "directory"
	case unix.S_IFLNK:
		return "symlink"
	case unix.S_IFCHR:
		return "char device"
	case unix.S_IFBLK:
		return "block device"
	case unix.S_IFIFO:
		return "fifo"
	case unix.S_IFSOCK:
		return "socket"
	}
	return fmt.Sprintf("type %#o", mode&unix.S_IFMT)
}

func timeString(ts unix.Timespec) string {
	return time.Unix(ts.Sec, ts.Nsec).UTC().Format("2006-01-02T15:04:05.000000000Z")
}

// groupString lists the hardlink group of p, or says p stands alone.
func groupString(p string, group []string) string {
	if len(group) == 0 {
		return "[" + showPath(p) + "] (own inode)"
	}
	shown := make([]string, len(group))
	for i, q := range group {
		shown[i] = showPath(q)
	}
	return "[" + strings.Join(shown, " ") + "]"
}
