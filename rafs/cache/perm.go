package cache

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/user"
	"path/filepath"
	"strconv"

	"golang.org/x/sys/unix"
)

// Modes of what a Cache creates (CACHE.md, "Permissions"). Chunks are
// image data, possibly of private images: only the owner reads them,
// unless Config.Group names a group of readers.
const (
	ownerDirMode  = 0o700
	ownerFileMode = 0o600
	groupDirMode  = 0o750
	groupFileMode = 0o640
)

// perm is the mode and group a Cache gives every directory and file it
// creates, whatever the process's umask: it sets them explicitly after
// creating.
type perm struct {
	dir, file os.FileMode
	gid       int // the group to chown to; -1 leaves the creator's
}

// newPerm returns the permissions for group gid, or the owner-only ones
// when gid is -1.
func newPerm(gid int) perm {
	if gid < 0 {
		return perm{dir: ownerDirMode, file: ownerFileMode, gid: -1}
	}
	return perm{dir: groupDirMode, file: groupFileMode, gid: gid}
}

// resolveGroup turns Config.Group into a gid: a number is taken as it
// is, a name is looked up. Empty means none, -1.
func resolveGroup(g string) (int, error) {
	if g == "" {
		return -1, nil
	}
	if n, err := strconv.ParseUint(g, 10, 31); err == nil {
		return int(n), nil
	}
	gr, err := user.LookupGroup(g)
	if err != nil {
		return -1, err
	}
	n, err := strconv.Atoi(gr.Gid)
	if err != nil {
		return -1, fmt.Errorf("group %s has gid %q", g, gr.Gid)
	}
	return n, nil
}

// mkdirs creates each of dirs that is missing, in order (each the parent
// of the next), with p's mode and group. The directories above the first
// are created as os.MkdirAll does, 0755 less the umask: they hold
// nothing of the cache's. An existing directory is left as it is.
func (p perm) mkdirs(dirs ...string) error {
	if err := os.MkdirAll(filepath.Dir(dirs[0]), 0o755); err != nil {
		return err
	}
	for _, d := range dirs {
		err := os.Mkdir(d, p.dir)
		if errors.Is(err, fs.ErrExist) {
			continue
		}
		if err == nil {
			err = p.setDir(d)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setDir gives the directory at path p's group and mode.
func (p perm) setDir(path string) error {
	if p.gid >= 0 {
		if err := os.Lchown(path, -1, p.gid); err != nil {
			return err
		}
	}
	return os.Chmod(path, p.dir)
}

// setFile gives the open file f p's group and mode.
func (p perm) setFile(f *os.File) error {
	if p.gid >= 0 {
		if err := f.Chown(-1, p.gid); err != nil {
			return err
		}
	}
	return f.Chmod(p.file)
}

// wrong reports whether st, of a file of the kind mode is for, has other
// permission bits or (with a group) another group than p gives, and is
// this process's to change: it owns it, or is root.
func (p perm) wrong(st *unix.Stat_t, mode os.FileMode) bool {
	if euid := os.Geteuid(); euid != 0 && int(st.Uid) != euid {
		return false
	}
	return os.FileMode(st.Mode)&os.ModePerm != mode || p.gid >= 0 && int(st.Gid) != p.gid
}

// fixAt gives the file name in the directory dirfd p's file mode and
// group, if it has others; it reports whether it changed anything.
// Errors (the file gone meanwhile, say) leave it as it was: the next
// scan tries again.
func (p perm) fixAt(dirfd int, name string, st *unix.Stat_t) bool {
	if !p.wrong(st, p.file) {
		return false
	}
	if p.gid >= 0 && unix.Fchownat(dirfd, name, -1, p.gid, unix.AT_SYMLINK_NOFOLLOW) != nil {
		return false
	}
	return unix.Fchmodat(dirfd, name, uint32(p.file), 0) == nil
}

// fixDirs gives each of dirs that exists p's directory mode and group
// if it has others, and returns how many it changed: directories made
// by an older version, by hand, or with another Config.Group. Symlinks
// are not followed.
func (p perm) fixDirs(dirs []string) (int, error) {
	n := 0
	for _, d := range dirs {
		var st unix.Stat_t
		err := unix.Lstat(d, &st)
		if errors.Is(err, unix.ENOENT) {
			continue
		}
		if err != nil {
			return n, &fs.PathError{Op: "lstat", Path: d, Err: err}
		}
		if st.Mode&unix.S_IFMT != unix.S_IFDIR || !p.wrong(&st, p.dir) {
			continue
		}
		if err := p.setDir(d); err != nil {
			return n, err
		}
		n++
	}
	return n, nil
}

// writable reports whether this process may create files in dir. A
// process that only reads a cache another user owns (a mount daemon in
// Config.Group) may not.
func writable(dir string) bool {
	err := unix.Access(dir, unix.W_OK)
	return !errors.Is(err, unix.EACCES) && !errors.Is(err, unix.EPERM) && !errors.Is(err, unix.EROFS)
}
