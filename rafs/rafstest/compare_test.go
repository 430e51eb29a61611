package rafstest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// buildTree makes a small tree with every kind of node CompareTrees looks
// at, with fixed mtimes, so two calls give equal trees.
func buildTree(t *testing.T, root string) {
	t.Helper()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(os.MkdirAll(filepath.Join(root, "d"), 0o755))
	must(os.WriteFile(filepath.Join(root, "d/f"), []byte("hello, world\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "g"), []byte("xattrs\n"), 0o644))
	must(os.WriteFile(filepath.Join(root, "h1"), []byte("linked\n"), 0o644))
	must(os.Link(filepath.Join(root, "h1"), filepath.Join(root, "h2")))
	must(os.Symlink("d/f", filepath.Join(root, "s")))
	must(unix.Mkfifo(filepath.Join(root, "p"), 0o600))
	for p, mode := range map[string]uint32{"d": 0o755, "d/f": 0o644, "g": 0o644, "h1": 0o644, "p": 0o600} {
		must(unix.Chmod(filepath.Join(root, p), mode)) // fixed whatever the umask
	}
	if err := unix.Lsetxattr(filepath.Join(root, "g"), "user.x", []byte("one"), 0); err != nil {
		if errors.Is(err, unix.ENOTSUP) {
			SkipOrFail(t, "user xattrs are required on the temporary directory's filesystem")
		}
		t.Fatal(err)
	}
	// Children first, so that setting a child does not move its parent's mtime.
	for i, p := range []string{"d/f", "g", "h1", "s", "p", "d", "."} {
		setMtime(t, filepath.Join(root, p), time.Unix(1600000000+int64(i), int64(i)*1000+7))
	}
}

func setMtime(t *testing.T, p string, mt time.Time) {
	t.Helper()
	ts := []unix.Timespec{unix.NsecToTimespec(mt.UnixNano()), unix.NsecToTimespec(mt.UnixNano())}
	if err := unix.UtimesNanoAt(unix.AT_FDCWD, p, ts, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		t.Fatal(err)
	}
}

// keepMtimes runs f and then restores the mtimes of the given paths, so that
// a planted change shows up once, not also as its parent's new mtime.
func keepMtimes(t *testing.T, root string, f func() error, paths ...string) {
	t.Helper()
	saved := make([]unix.Stat_t, len(paths))
	for i, p := range paths {
		if err := unix.Lstat(filepath.Join(root, p), &saved[i]); err != nil {
			t.Fatal(err)
		}
	}
	if err := f(); err != nil {
		t.Fatal(err)
	}
	for i, p := range paths {
		setMtime(t, filepath.Join(root, p), time.Unix(saved[i].Mtim.Unix()))
	}
}

func TestCompareTreesPlanted(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name  string
		plant func(t *testing.T, root string)
		want  []string // each a substring of one reported line, in order
	}{
		{"identical", func(t *testing.T, root string) {}, nil},
		{"changed byte", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error {
				f, err := os.OpenFile(filepath.Join(root, "d/f"), os.O_WRONLY, 0)
				if err != nil {
					return err
				}
				if _, err := f.WriteAt([]byte("J"), 7); err != nil {
					return err
				}
				return f.Close()
			}, "d/f")
		}, []string{"d/f: content differs from byte 7"}},
		{"changed size", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error { return os.Truncate(filepath.Join(root, "g"), 3) }, "g")
		}, []string{"g: size got 3 want 7"}},
		{"changed mode", func(t *testing.T, root string) {
			if err := unix.Chmod(filepath.Join(root, "g"), 0o4600); err != nil {
				t.Fatal(err)
			}
		}, []string{"g: mode got 4600 want 0644"}},
		{"changed owner", func(t *testing.T, root string) {
			if err := os.Lchown(filepath.Join(root, "s"), 1000, 1001); err != nil {
				if os.Geteuid() != 0 {
					SkipOrFail(t, "chown needs root")
				}
				t.Fatal(err)
			}
		}, []string{"s: owner got 1000:1001 want 0:0"}},
		{"changed mtime nsec", func(t *testing.T, root string) {
			setMtime(t, filepath.Join(root, "d"), time.Unix(1600000005, 5008))
		}, []string{"d: mtime got 2020-09-13T12:26:45.000005008Z want 2020-09-13T12:26:45.000005007Z"}},
		{"symlink mtime", func(t *testing.T, root string) {
			setMtime(t, filepath.Join(root, "s"), time.Unix(1, 0))
		}, []string{"s: mtime got 1970-01-01T00:00:01.000000000Z"}},
		{"missing file", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error { return os.Remove(filepath.Join(root, "d/f")) }, "d")
		}, []string{"d/f: missing (want regular file)"}},
		{"extra file", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error { return os.WriteFile(filepath.Join(root, "d/new\nline"), nil, 0o644) }, "d")
		}, []string{`"d/new\nline": unexpected regular file`}},
		{"type change", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error {
				if err := os.Remove(filepath.Join(root, "p")); err != nil {
					return err
				}
				return os.Mkdir(filepath.Join(root, "p"), 0o600)
			}, ".")
		}, []string{"p: type got directory want fifo"}},
		{"symlink target", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error {
				if err := os.Remove(filepath.Join(root, "s")); err != nil {
					return err
				}
				return os.Symlink("g", filepath.Join(root, "s"))
			}, ".")
			setMtime(t, filepath.Join(root, "s"), time.Unix(1600000003, 3007))
		}, []string{`s: symlink target got "g" want "d/f"`}},
		{"broken hardlink group", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error {
				if err := os.Remove(filepath.Join(root, "h2")); err != nil {
					return err
				}
				return os.WriteFile(filepath.Join(root, "h2"), []byte("linked\n"), 0o644)
			}, ".")
			setMtime(t, filepath.Join(root, "h2"), time.Unix(1600000002, 2007))
		}, []string{
			"h1: link count got 1 want 2",
			"h1: hardlink group got [h1] (own inode) want [h1 h2]",
			"h2: link count got 1 want 2",
		}},
		{"joined hardlink group", func(t *testing.T, root string) {
			keepMtimes(t, root, func() error {
				if err := os.Remove(filepath.Join(root, "g")); err != nil {
					return err
				}
				return os.Link(filepath.Join(root, "d/f"), filepath.Join(root, "g"))
			}, ".")
		}, []string{
			"d/f: link count got 2 want 1",
			"d/f: hardlink group got [d/f g] want [d/f] (own inode)",
			"g: mtime got",
			"g: xattr user.x missing",
			"g: link count got 2 want 1",
			"g: size got 13 want 7",
		}},
		{"changed xattr", func(t *testing.T, root string) {
			if err := unix.Lsetxattr(filepath.Join(root, "g"), "user.x", []byte("two"), 0); err != nil {
				t.Fatal(err)
			}
		}, []string{`g: xattr user.x got "two" want "one"`}},
		{"extra xattr", func(t *testing.T, root string) {
			if err := unix.Lsetxattr(filepath.Join(root, "d"), "user.y", nil, 0); err != nil {
				t.Fatal(err)
			}
		}, []string{`d: unexpected xattr user.y=""`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			want, got := t.TempDir(), t.TempDir()
			buildTree(t, want)
			buildTree(t, got)
			tt.plant(t, got)
			diffs := CompareTrees(want, got)
			if len(diffs) != len(tt.want) {
				t.Fatalf("got %d differences, want %d:\n%s", len(diffs), len(tt.want), strings.Join(diffs, "\n"))
			}
			for i, w := range tt.want {
				if !strings.Contains(diffs[i], w) {
					t.Errorf("difference %d got %q, want it to contain %q", i, diffs[i], w)
				}
			}
		})
	}
}

func TestCompareTreesIgnoreMtime(t *testing.T) {
	t.Parallel()
	want, got := t.TempDir(), t.TempDir()
	buildTree(t, want)
	buildTree(t, got)
	setMtime(t, filepath.Join(got, "d"), time.Now())
	setMtime(t, got, time.Now())
	if diffs := CompareTreesWith(want, got, CompareOptions{IgnoreMtime: []string{".", "d"}}); len(diffs) != 0 {
		t.Errorf("got differences %q, want none", diffs)
	}
	if diffs := CompareTrees(want, got); len(diffs) != 2 {
		t.Errorf("without options got %d differences %q, want 2", len(diffs), diffs)
	}
}

func TestCompareTreesCap(t *testing.T) {
	t.Parallel()
	want, got := t.TempDir(), t.TempDir()
	for i := range MaxReported + 10 {
		if err := os.WriteFile(filepath.Join(want, fmt.Sprintf("f%03d", i)), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	setMtime(t, want, time.Unix(0, 0))
	setMtime(t, got, time.Unix(0, 0))
	diffs := CompareTrees(want, got)
	if len(diffs) != MaxReported+1 {
		t.Fatalf("got %d lines, want %d", len(diffs), MaxReported+1)
	}
	if last, w := diffs[MaxReported], "... and 10 more differences"; last != w {
		t.Errorf("last line got %q, want %q", last, w)
	}
}

func TestCompareTreesMissingRoot(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	diffs := CompareTrees(dir, filepath.Join(dir, "nope"))
	if len(diffs) != 1 || !strings.HasPrefix(diffs[0], "got tree: lstat") {
		t.Errorf("got %q, want one got tree error", diffs)
	}
}

// TestCompareTreesUmoci unpacks every corpus image twice and requires no
// differences but for implicit directories' mtimes; and checks that the
// differences between base-v1 and base-v2 are exactly those v2 made.
func TestCompareTreesUmoci(t *testing.T) {
	requireUmoci(t)
	t.Parallel()
	imgs := Corpus(CorpusOptions{})
	dir := t.TempDir()
	a := unpackAll(t, dir, imgs, "-a")
	b := unpackAll(t, dir, imgs, "-b")
	for _, img := range imgs {
		if diffs := CompareTreesWith(a[img.Name], b[img.Name], CompareOptions{IgnoreMtime: img.ImplicitDirs()}); len(diffs) != 0 {
			t.Errorf("%s: two unpacks differ:\n%s", img.Name, strings.Join(diffs, "\n"))
		}
	}
	got := CompareTrees(a["base-v1"], b["base-v2"])
	want := []string{
		"app/added-in-v2: unexpected regular file",
		"app/bin: mtime got",
		"app/bin: content differs from byte 1048576",
		"app/config.json: mtime got",
		"app/config.json: content differs from byte 12",
		"app/large-data: unexpected regular file",
		"app/removed-in-v2: missing (want regular file)",
		"etc/hostname: missing (want regular file)",
	}
	if len(got) != len(want) {
		t.Fatalf("base-v1 against base-v2: got %d differences, want %d:\n%s", len(got), len(want), strings.Join(got, "\n"))
	}
	for i, w := range want {
		if !strings.HasPrefix(got[i], w) {
			t.Errorf("base-v1 against base-v2: difference %d got %q, want it to start with %q", i, got[i], w)
		}
	}
}
