package rafstest

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// spotCheck is one named corner case of one image.
type spotCheck struct {
	image, what string
	check       func(root string) error
}

func spotChecks() []spotCheck {
	return []spotCheck{
		{"whiteouts", "whited-out file is absent", absent("wh/gone")},
		{"whiteouts", "whited-out directory lost its contents", absent("wh/dir/a", "wh/dir/sub")},
		{"whiteouts", "directory re-created after its whiteout", listing("wh/dir", "fresh")},
		{"whiteouts", "opaque dir lost lower children, kept its own", listing("wh/opq", "new", "olddir")},
		{"whiteouts", "opaque dir's re-created child holds only new files", listing("wh/opq/olddir", "nf")},
		{"whiteouts", "opaque over two layers", listing("wh/opq3", "l3b")},
		{"whiteouts", "opaque marker after a new sibling", listing("wh/opq-late", "new")},
		{"whiteouts", "file recreated after whiteout", all(hasContent("wh/recreate", "version 3, re-created after a whiteout\n"), owner("wh/recreate", 1000, 1000))},
		{"whiteouts", "whiteout of one hardlink name keeps the other", all(hasContent("wh/hl-b", "shared by hl-a and hl-b; hl-a is whited out\n"), nlink("wh/hl-b", 1))},
		{"whiteouts", "whited-out symlink is gone, its target stays", all(absent("wh/sym"), isType("wh/keep", unix.S_IFREG))},
		{"replace", "directory replaced by a file", isType("rp/wd2f", unix.S_IFREG)},
		{"replace", "file, directory, file", all(isType("rp/f2d", unix.S_IFREG), hasContent("rp/f2d", "a file again\n"))},
		{"replace", "directory, file, directory keeps no old child", listing("rp/flip", "again")},
		{"replace", "d2f back to a directory", listing("rp/d2f", "new")},
		{"replace", "file replaced by a symlink", linkTarget("rp/f2s", "f2d")},
		{"hardlinks", "group of three shares an inode", all(sameInode("hl/g1", "hl/g2", "hl/g3", "hl/d2/g4"), nlink("hl/g1", 4))},
		{"hardlinks", "link to a lower layer's file", all(sameInode("hl/lower", "hl/up-link", "hl/other/cross-dir"), nlink("hl/lower", 3))},
		{"hardlinks", "hardlink to a symlink", all(sameInode("hl/sym", "hl/sym-link"), linkTarget("hl/sym-link", "g1"))},
		{"hardlinks", "rewriting one name splits the group", all(nlink("hl/split-a", 1), nlink("hl/split-b", 1), hasContent("hl/split-b", "rewritten in layer 2, which splits the pair\n"))},
		{"symlinks", "absolute, dangling and long targets", all(linkTarget("sym/abs", "/etc/passwd"), linkTarget("sym/dangling", "does/not/exist"), linkTargetLen("sym/long", 4095))},
		{"symlinks", "symlink replaced by a file", hasContent("sym/becomes-file", "was a symlink; the target must be untouched\n")},
		{"symlinks", "symlink owner", owner("sym/owned", 1000, 1000)},
		{"names", "255-byte names", all(isType("names/"+fill("long-name-", 255), unix.S_IFREG), isType("names/"+strings.Repeat("日", 85), unix.S_IFREG))},
		{"names", "unicode and odd names", isType("names/naïve", "names/日本語/ファイル.txt", "names/🐳🚀", "names/new\nline", "names/foo.wh.bar", unix.S_IFREG)},
		{"names", "60-level path", isType(deepPath()+"/bottom", unix.S_IFREG)},
		{"names", "implicit parents exist", isType("implicit/a/b/c", "names/implicit-child", unix.S_IFDIR)},
		{"sizes", "sizes at chunk edges", all(size("sizes/empty", 0), size("sizes/chunk-minus-1", DefaultChunkSize-1), size("sizes/chunk-plus-1", DefaultChunkSize+1), size("sizes/repeating", 7*DefaultChunkSize+100))},
		{"meta", "setuid, setgid, sticky", all(mode("meta/setuid", 0o4755), mode("meta/setgid", 0o2755), mode("meta/sticky", 0o1777), mode("meta/all-bits", 0o7777))},
		{"meta", "read-only and 0000 directories", all(mode("meta/readonly-dir", 0o555), mode("meta/no-perms-dir", 0))},
		{"meta", "owners, 32-bit ids", all(owner("meta/owner-mixed", 12345, 54321), owner("meta/owner-big", 3000000, 4000000000))},
		{"meta", "xattrs on file, directory and symlink", all(xattr("meta/xattr-file", "user.foo", "bar"), xattr("meta/xattr-file", "trusted.foo", "trusted value"), xattr("meta/xattr-dir", "user.dirattr", "on a directory"), xattr("meta/xattr-symlink", "trusted.link", "on a symlink"))},
		{"meta", "an empty xattr value is no xattr", noXattr("meta/xattr-file", "user.empty")},
		{"meta", "mtime nanoseconds, before 1970, after 2038", all(mtime("meta/old", time.Date(1965, time.July, 20, 20, 17, 40, 500000001, time.UTC)), mtime("meta/after-2038", time.Date(2040, time.February, 29, 1, 2, 3, 999999999, time.UTC)))},
		{"meta", "directory mtime survives its children", mtime("meta/dir-old-mtime", time.Date(1999, time.December, 31, 23, 59, 59, 1, time.UTC))},
		{"devices", "device numbers", all(rdev("dev/sda", unix.S_IFBLK, 8, 0), rdev("dev/nvme0n1p9", unix.S_IFBLK, 259, 65537), rdev("dev/max", unix.S_IFCHR, 4095, 1048575), rdev("dev/null", unix.S_IFCHR, 1, 3))},
		{"devices", "fifo", isType("dev/fifo", unix.S_IFIFO)},
		{"base-v2", "v2 removed and added files", all(absent("etc/hostname", "app/removed-in-v2"), isType("app/added-in-v2", unix.S_IFREG))},
		{"base-v1", "v1 keeps the base's hostname", hasContent("etc/hostname", "base\n")},
	}
}

func deepPath() string {
	p := "deep"
	for i := range 60 {
		p += fmt.Sprintf("/level-%02d", i)
	}
	return p
}

// The spot check helpers below each return a check of the tree at root.

func all(cs ...func(string) error) func(string) error {
	return func(root string) error {
		for _, c := range cs {
			if err := c(root); err != nil {
				return err
			}
		}
		return nil
	}
}

func lstat(root, p string) (unix.Stat_t, error) {
	var st unix.Stat_t
	err := unix.Lstat(filepath.Join(root, p), &st)
	if err != nil {
		err = fmt.Errorf("lstat %s: %w", p, err)
	}
	return st, err
}

func absent(ps ...string) func(string) error {
	return func(root string) error {
		for _, p := range ps {
			if _, err := lstat(root, p); err == nil {
				return fmt.Errorf("%s exists, want it absent", p)
			}
		}
		return nil
	}
}

// isType takes paths followed by one S_IF* type.
func isType(args ...any) func(string) error {
	typ := args[len(args)-1].(int)
	return func(root string) error {
		for _, a := range args[:len(args)-1] {
			st, err := lstat(root, a.(string))
			if err != nil {
				return err
			}
			if st.Mode&unix.S_IFMT != uint32(typ) {
				return fmt.Errorf("%s: type got %s, want %s", a, typeName(st.Mode), typeName(uint32(typ)))
			}
		}
		return nil
	}
}

func listing(dir string, want ...string) func(string) error {
	return func(root string) error {
		ents, err := os.ReadDir(filepath.Join(root, dir))
		if err != nil {
			return err
		}
		var got []string
		for _, e := range ents {
			got = append(got, e.Name())
		}
		if !slices.Equal(got, want) {
			return fmt.Errorf("%s holds %q, want %q", dir, got, want)
		}
		return nil
	}
}

func hasContent(p, want string) func(string) error {
	return func(root string) error {
		b, err := os.ReadFile(filepath.Join(root, p))
		if err != nil {
			return err
		}
		if string(b) != want {
			return fmt.Errorf("%s holds %q, want %q", p, b, want)
		}
		return nil
	}
}

func statCheck(p string, f func(st unix.Stat_t) error) func(string) error {
	return func(root string) error {
		st, err := lstat(root, p)
		if err != nil {
			return err
		}
		if err := f(st); err != nil {
			return fmt.Errorf("%s: %w", p, err)
		}
		return nil
	}
}

func mode(p string, want uint32) func(string) error {
	return statCheck(p, func(st unix.Stat_t) error {
		if st.Mode&0o7777 != want {
			return fmt.Errorf("mode got %04o, want %04o", st.Mode&0o7777, want)
		}
		return nil
	})
}

func owner(p string, uid, gid uint32) func(string) error {
	return statCheck(p, func(st unix.Stat_t) error {
		if st.Uid != uid || st.Gid != gid {
			return fmt.Errorf("owner got %d:%d, want %d:%d", st.Uid, st.Gid, uid, gid)
		}
		return nil
	})
}

func nlink(p string, want uint64) func(string) error {
	return statCheck(p, func(st unix.Stat_t) error {
		if uint64(st.Nlink) != want {
			return fmt.Errorf("link count got %d, want %d", st.Nlink, want)
		}
		return nil
	})
}

func size(p string, want int64) func(string) error {
	return statCheck(p, func(st unix.Stat_t) error {
		if st.Size != want {
			return fmt.Errorf("size got %d, want %d", st.Size, want)
		}
		return nil
	})
}

func mtime(p string, want time.Time) func(string) error {
	return statCheck(p, func(st unix.Stat_t) error {
		if w := unix.NsecToTimespec(want.UnixNano()); st.Mtim != w {
			return fmt.Errorf("mtime got %s, want %s", timeString(st.Mtim), timeString(w))
		}
		return nil
	})
}

func rdev(p string, typ uint32, major, minor uint32) func(string) error {
	return statCheck(p, func(st unix.Stat_t) error {
		if st.Mode&unix.S_IFMT != typ || unix.Major(st.Rdev) != major || unix.Minor(st.Rdev) != minor {
			return fmt.Errorf("got %s %d:%d, want %s %d:%d", typeName(st.Mode), unix.Major(st.Rdev), unix.Minor(st.Rdev), typeName(typ), major, minor)
		}
		return nil
	})
}

func sameInode(ps ...string) func(string) error {
	return func(root string) error {
		first, err := lstat(root, ps[0])
		if err != nil {
			return err
		}
		for _, p := range ps[1:] {
			st, err := lstat(root, p)
			if err != nil {
				return err
			}
			if st.Ino != first.Ino || st.Dev != first.Dev {
				return fmt.Errorf("%s and %s are different inodes, want one", ps[0], p)
			}
		}
		return nil
	}
}

func linkTarget(p, want string) func(string) error {
	return func(root string) error {
		got, err := os.Readlink(filepath.Join(root, p))
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s -> %q, want %q", p, got, want)
		}
		return nil
	}
}

func linkTargetLen(p string, want int) func(string) error {
	return func(root string) error {
		got, err := os.Readlink(filepath.Join(root, p))
		if err != nil {
			return err
		}
		if len(got) != want {
			return fmt.Errorf("%s: target of %d bytes, want %d", p, len(got), want)
		}
		return nil
	}
}

func xattr(p, name, want string) func(string) error {
	return func(root string) error {
		got, err := getXattr(filepath.Join(root, p), name)
		if err != nil {
			return err
		}
		if got != want {
			return fmt.Errorf("%s: xattr %s got %q, want %q", p, name, got, want)
		}
		return nil
	}
}

func noXattr(p, name string) func(string) error {
	return func(root string) error {
		if got, err := getXattr(filepath.Join(root, p), name); err == nil {
			return fmt.Errorf("%s: xattr %s=%q, want none", p, name, got)
		}
		return nil
	}
}
