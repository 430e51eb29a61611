package cache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

// nobody is the user and group the permission tests act another
// process as; chown by number works as root whether or not a name exists.
const nobody = 65534

// withUmask runs the test under umask m, for modes that must not depend
// on it. The umask is the process's: tests that call this do not run in
// parallel, and it is restored before any parallel test resumes.
func withUmask(t *testing.T, m int) {
	old := syscall.Umask(m)
	t.Cleanup(func() { syscall.Umask(old) })
}

// wantModes fails unless every directory under dir (dir too) has mode
// dirMode and every regular file fileMode, all with group gid unless gid
// is -1.
func wantModes(t *testing.T, dir string, dirMode, fileMode fs.FileMode, gid int) {
	t.Helper()
	n := 0
	err := filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		want := fileMode
		if fi.IsDir() {
			want = dirMode
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s: got mode %v, want %v", path, got, want)
		}
		if g := int(fi.Sys().(*syscall.Stat_t).Gid); gid >= 0 && g != gid {
			t.Errorf("%s: got group %d, want %d", path, g, gid)
		}
		n++
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if n < 2+256+2 {
		t.Fatalf("walked %d files and directories, want the cache's 260 or more", n)
	}
}

// Everything a cache creates (its directory, chunks/, the shards, the
// lock, entries, and what it creates again after an rm -rf) is 0700 and
// 0600, or 0750 and 0640 owned by Config.Group, under a umask that masks
// nothing.
func TestModesUnderPermissiveUmask(t *testing.T) {
	withUmask(t, 0)
	tests := []struct {
		name, group       string
		dirMode, fileMode fs.FileMode
		gid               int
	}{
		{"owner only", "", 0o700, 0o600, -1},
		{"group by gid", strconv.Itoa(nobody), 0o750, 0o640, nobody},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, direct := range []bool{false, true} {
				dir := filepath.Join(t.TempDir(), "parent", fmt.Sprintf("cache-%v", direct))
				c := openTestIO(t, func() Config { cc := Default(""); cc.Dir, cc.Group, cc.DirectIO = dir, tt.group, direct; return cc }())
				mustPut(t, c, fakeDigest(1), rawMeta(100), content(1, 100))
				if err := c.Rescan(); err != nil { // creates the lock file
					t.Fatal(err)
				}
				if _, err := c.PutFile("bootstraps", "0123", []byte("a bootstrap")); err != nil {
					t.Fatal(err)
				}
				wantModes(t, dir, tt.dirMode, tt.fileMode, tt.gid)

				// Deleted by hand while in use: what Put makes again.
				if err := os.RemoveAll(dir); err != nil {
					t.Fatal(err)
				}
				mustPut(t, c, fakeDigest(2), rawMeta(100), content(2, 100))
				if err := c.Rescan(); err != nil {
					t.Fatal(err)
				}
				// Only dir, chunks, one shard, the lock and one entry now.
				filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
					if err != nil {
						return err
					}
					fi, _ := de.Info()
					want := tt.fileMode
					if fi.IsDir() {
						want = tt.dirMode
					}
					if got := fi.Mode().Perm(); got != want {
						t.Errorf("after rm -rf: %s: got mode %v, want %v", path, got, want)
					}
					return nil
				})
			}
		})
	}
}

func TestPutFile(t *testing.T) {
	t.Parallel()
	c := openTestIO(t, Default(""))
	path, err := c.PutFile("bootstraps", "abc", []byte("one"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.PutFile("bootstraps", "abc", []byte("two")); err != nil {
		t.Fatal(err)
	}
	if got, err := os.ReadFile(path); err != nil || string(got) != "two" {
		t.Fatalf("got %q, %v; want the second write", got, err)
	}
	for _, bad := range [][2]string{{"", "x"}, {"bootstraps", ""}, {"..", "x"}, {"a/b", "x"}, {"bootstraps", ".tmp-x"}, {"chunks", "x"}, {"lock", "x"}} {
		if _, err := c.PutFile(bad[0], bad[1], nil); err == nil {
			t.Errorf("PutFile(%q, %q): got no error", bad[0], bad[1])
		}
	}
	if got := tempFiles(t, c.cfg.Dir); len(got) != 0 {
		t.Errorf("temp files left: %v", got)
	}
}

// A cache made loose (0755 and 0644, as older versions did) is tightened
// when opened, and the open says so in its log; opened with a group, it
// gets that group.
func TestOpenTightensLooseModes(t *testing.T) {
	withUmask(t, 0)
	for _, group := range []string{"", strconv.Itoa(nobody)} {
		t.Run("group="+group, func(t *testing.T) {
			dir := t.TempDir()
			c := openTestIO(t, Default(dir))
			for i := range uint64(3) {
				mustPut(t, c, fakeDigest(i), rawMeta(100), content(i, 100))
			}
			if err := c.Rescan(); err != nil {
				t.Fatal(err)
			}
			c.Close()
			filepath.WalkDir(dir, func(path string, de fs.DirEntry, err error) error {
				if err == nil {
					mode := fs.FileMode(0o644)
					if de.IsDir() {
						mode = 0o755
					}
					err = os.Chmod(path, mode)
				}
				return err
			})

			var log bytes.Buffer
			c2 := openTestIO(t, func() Config {
				cc := Default("")
				cc.Dir, cc.Group, cc.Logger = dir, group, slog.New(slog.NewTextHandler(&log, nil))
				return cc
			}())
			if got := len(c2.Keys()); got != 3 {
				t.Fatalf("got %d entries after reopening, want 3", got)
			}
			dirMode, fileMode, gid := fs.FileMode(0o700), fs.FileMode(0o600), -1
			if group != "" {
				dirMode, fileMode, gid = 0o750, 0o640, nobody
			}
			wantModes(t, dir, dirMode, fileMode, gid)
			for _, want := range []string{"set directory permissions", "set file permissions"} {
				if !strings.Contains(log.String(), want) {
					t.Errorf("log does not say %q:\n%s", want, log.String())
				}
			}
		})
	}
}

func TestGroupConfig(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		group string
		gid   int
		bad   bool
	}{
		{"", -1, false},
		{"0", 0, false},
		{"root", 0, false},
		{"4242", 4242, false},
		{"no-such-group-damselfly", -1, true},
		{"-1", -1, true},
	} {
		gid, err := resolveGroup(tt.group)
		if tt.bad {
			if err == nil {
				t.Errorf("group %q: got gid %d, want an error", tt.group, gid)
			}
			c := Default("x")
			c.Group = tt.group
			if err := c.Validate(); err == nil || !strings.Contains(err.Error(), "group:") {
				t.Errorf("Validate with group %q: got %v, want an error naming group", tt.group, err)
			}
			continue
		}
		if err != nil || gid != tt.gid {
			t.Errorf("group %q: got %d, %v; want %d", tt.group, gid, err, tt.gid)
		}
	}
}

// readerEnv, when set, makes TestGroupReader act the reader process.
const readerEnv = "DAMSELFLY_CACHE_TEST_READER"

// A mount daemon running as another user in Config.Group reads what the
// peer daemon stored; it cannot write (Put says ErrReadOnly) and its
// rescans work without evicting. Without a group, the same user cannot
// open the cache at all. The reader is this test binary run again as
// user and group 65534.
func TestGroupReader(t *testing.T) {
	if spec := os.Getenv(readerEnv); spec != "" {
		actReader(t, spec)
		return
	}
	if os.Geteuid() != 0 {
		t.Fatal("TestGroupReader needs root, to run a reader as another user")
	}
	// The reader must reach the cache and its own binary: t.TempDir's
	// parents are 0700, so open them up.
	base := t.TempDir()
	for p := base; p != os.TempDir() && p != "/"; p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	bin := filepath.Join(base, "cache.test")
	copyFile(t, os.Args[0], bin)

	tc := makeChunk(7, 64<<10, true)
	for _, tt := range []struct {
		group  string
		wantOK bool
	}{
		{strconv.Itoa(nobody), true},
		{"", false},
	} {
		t.Run("group="+tt.group, func(t *testing.T) {
			dir := filepath.Join(base, "cache-"+tt.group)
			c := openTestIO(t, func() Config { cc := Default(""); cc.Dir, cc.Group, cc.Capacity = dir, tt.group, 1<<20; return cc }())
			if err := c.PutChunk(tc.ck, tc.stored); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "-test.run=^TestGroupReader$", "-test.count=1")
			cmd.Env = append(os.Environ(), readerEnv+"="+dir+","+tt.group)
			cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nobody, Gid: nobody}}
			out, err := cmd.CombinedOutput()
			if tt.wantOK && err != nil {
				t.Fatalf("reader in the group: %v\n%s", err, out)
			}
			if !tt.wantOK {
				if err == nil || !strings.Contains(string(out), "permission denied") {
					t.Fatalf("reader outside any group: got %v, want it denied:\n%s", err, out)
				}
			}
			if has := exists(filepath.Join(dir, packsDirName, c.packNameOf(tc.ckKey()))); !has {
				t.Error("the reader's open or rescan deleted the pack")
			}
		})
	}
}

// actReader is TestGroupReader's reader: spec is "DIR,GROUP".
func actReader(t *testing.T, spec string) {
	dir, group, _ := strings.Cut(spec, ",")
	tc := makeChunk(7, 64<<10, true)
	c, err := Open(func() Config { cc := Default(""); cc.Dir, cc.Group, cc.Capacity = dir, group, 1<<20; return cc }())
	if err != nil {
		t.Fatalf("as uid %d: Open: %v", os.Geteuid(), err)
	}
	defer c.Close()
	dst := make([]byte, tc.ck.Size)
	if err := c.ReadChunk(tc.ck, dst); err != nil {
		t.Fatalf("as uid %d: ReadChunk: %v", os.Geteuid(), err)
	}
	if !bytes.Equal(dst, tc.data) {
		t.Fatal("read other bytes than were stored")
	}
	other := makeChunk(8, 1000, false)
	if err := c.PutChunk(other.ck, other.stored); !errors.Is(err, ErrReadOnly) {
		t.Fatalf("PutChunk by a reader: got %v, want ErrReadOnly", err)
	}
	if err := c.Rescan(); err != nil {
		t.Fatalf("Rescan by a reader: %v", err)
	}
	if !c.Has(tc.ckKey()) {
		t.Fatal("the reader's rescan does not see the entry")
	}
}

func copyFile(t *testing.T, from, to string) {
	t.Helper()
	src, err := os.Open(from)
	if err != nil {
		t.Fatal(err)
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := io.Copy(dst, src); err != nil {
		t.Fatal(err)
	}
	if err := dst.Close(); err != nil {
		t.Fatal(err)
	}
}
