package rafstest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"

	"golang.org/x/sys/unix"
)

// node is what CompareTrees knows of one path: its lstat, symlink target and
// xattrs.
type node struct {
	st     unix.Stat_t
	target string
	xattrs map[string]string
}

// tree maps slash-separated paths relative to a root ("." for the root) to
// their nodes.
type tree map[string]*node

// scanTree lstats everything under root without following symlinks.
func scanTree(root string) (tree, error) {
	t := tree{}
	if err := scanNode(t, root, "."); err != nil {
		return nil, err
	}
	return t, nil
}

func scanNode(t tree, root, rel string) error {
	abs := filepath.Join(root, filepath.FromSlash(rel))
	n := &node{}
	if err := unix.Lstat(abs, &n.st); err != nil {
		return fmt.Errorf("lstat %s: %w", abs, err)
	}
	if n.st.Mode&unix.S_IFMT == unix.S_IFLNK {
		target, err := os.Readlink(abs)
		if err != nil {
			return fmt.Errorf("readlink %s: %w", abs, err)
		}
		n.target = target
	}
	x, err := readXattrs(abs)
	if err != nil {
		return err
	}
	n.xattrs = x
	t[rel] = n
	if n.st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return nil
	}
	ents, err := os.ReadDir(abs)
	if err != nil {
		return fmt.Errorf("read directory %s: %w", abs, err)
	}
	for _, e := range ents {
		if err := scanNode(t, root, path.Join(rel, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// ignoredXattr reports xattrs that are not part of an image's content:
// security.* (SELinux labels and the like, which the host's security modules
// add on their own) and system.* (the kernel's view of POSIX ACLs).
func ignoredXattr(name string) bool {
	return strings.HasPrefix(name, "security.") || strings.HasPrefix(name, "system.")
}

// readXattrs returns the xattrs of p itself (not of a symlink's target).
func readXattrs(p string) (map[string]string, error) {
	size, err := unix.Llistxattr(p, nil)
	if errors.Is(err, unix.ENOTSUP) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %s: %w", p, err)
	}
	if size == 0 {
		return nil, nil
	}
	buf := make([]byte, size)
	size, err = unix.Llistxattr(p, buf)
	if err != nil {
		return nil, fmt.Errorf("list xattrs of %s: %w", p, err)
	}
	x := map[string]string{}
	for _, name := range strings.Split(strings.TrimRight(string(buf[:size]), "\x00"), "\x00") {
		if name == "" || ignoredXattr(name) {
			continue
		}
		v, err := getXattr(p, name)
		if err != nil {
			return nil, err
		}
		x[name] = v
	}
	return x, nil
}

func getXattr(p, name string) (string, error) {
	size, err := unix.Lgetxattr(p, name, nil)
	if err != nil {
		return "", fmt.Errorf("get xattr %s of %s: %w", name, p, err)
	}
	buf := make([]byte, size)
	size, err = unix.Lgetxattr(p, name, buf)
	if err != nil {
		return "", fmt.Errorf("get xattr %s of %s: %w", name, p, err)
	}
	return string(buf[:size]), nil
}

// sameContent streams two regular files and returns the offset of the first
// differing byte, or -1 when they are equal.
func sameContent(a, b string) (int64, error) {
	fa, err := os.Open(a)
	if err != nil {
		return 0, err
	}
	defer fa.Close()
	fb, err := os.Open(b)
	if err != nil {
		return 0, err
	}
	defer fb.Close()
	ba, bb := make([]byte, 256<<10), make([]byte, 256<<10)
	var off int64
	for {
		na, ea := io.ReadFull(fa, ba)
		nb, eb := io.ReadFull(fb, bb)
		if i := mismatch(ba[:na], bb[:nb]); i >= 0 {
			return off + int64(i), nil
		}
		off += int64(na)
		aEnd := ea == io.EOF || ea == io.ErrUnexpectedEOF
		bEnd := eb == io.EOF || eb == io.ErrUnexpectedEOF
		switch {
		case ea != nil && !aEnd:
			return 0, ea
		case eb != nil && !bEnd:
			return 0, eb
		case aEnd || bEnd:
			return -1, nil
		}
	}
}

// mismatch returns the first index where a and b differ, or -1 if they are
// equal; a length difference counts as a difference at the shorter length.
func mismatch(a, b []byte) int {
	if bytes.Equal(a, b) {
		return -1
	}
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}

// inodeGroups maps every non-directory path that shares its inode with
// another path to the sorted list of all those paths.
func inodeGroups(t tree) map[string][]string {
	type key struct{ dev, ino uint64 }
	byIno := map[key][]string{}
	for p, n := range t {
		if n.st.Mode&unix.S_IFMT == unix.S_IFDIR {
			continue
		}
		k := key{n.st.Dev, n.st.Ino}
		byIno[k] = append(byIno[k], p)
	}
	groups := map[string][]string{}
	for _, ps := range byIno {
		if len(ps) < 2 {
			continue
		}
		sort.Strings(ps)
		for _, p := range ps {
			groups[p] = ps
		}
	}
	return groups
}
