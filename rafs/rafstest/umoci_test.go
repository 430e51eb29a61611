package rafstest

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUmociUnpackCorpus unpacks every corpus image with umoci and checks, for
// every path, that umoci produced what the layer semantics in model say:
// type, mode, owner, mtime, bytes, symlink target, device numbers and xattrs;
// that nothing else exists but the implicit directories; and a table of
// spot checks that name the corner cases one by one.
func TestUmociUnpackCorpus(t *testing.T) {
	requireUmoci(t)
	t.Parallel()
	imgs := Corpus(CorpusOptions{})
	roots := unpackAll(t, t.TempDir(), imgs, "")
	for _, img := range imgs {
		t.Run(img.Name, func(t *testing.T) {
			t.Parallel()
			checkAgainstModel(t, img, roots[img.Name])
		})
	}
	t.Run("spot", func(t *testing.T) {
		for _, c := range spotChecks() {
			if err := c.check(roots[c.image]); err != nil {
				t.Errorf("%s: %s: %v", c.image, c.what, err)
			}
		}
	})
}

// checkAgainstModel compares the tree at root with model(img).
func checkAgainstModel(t *testing.T, img Image, root string) {
	t.Helper()
	m := model(img)
	implicit := img.ImplicitDirs()
	got, err := scanTree(root)
	if err != nil {
		t.Fatal(err)
	}
	for p := range got {
		if _, ok := m[p]; !ok && !slices.Contains(implicit, p) {
			t.Errorf("%q: unexpected in umoci's tree", p)
		}
	}
	for p, me := range m {
		n, ok := got[p]
		if !ok {
			t.Errorf("%q: missing from umoci's tree", p)
			continue
		}
		if err := matchHeader(n, me, filepath.Join(root, p)); err != nil {
			t.Errorf("%q: %v", p, err)
		}
	}
	for _, p := range implicit {
		n, ok := got[p]
		switch {
		case !ok:
			t.Errorf("%q: implicit directory missing", p)
		case n.st.Mode&unix.S_IFMT != unix.S_IFDIR || n.st.Uid != 0 || n.st.Gid != 0:
			t.Errorf("%q: implicit directory got mode %o owner %d:%d, want a directory owned by 0:0", p, n.st.Mode, n.st.Uid, n.st.Gid)
		}
	}
}

var tarTypes = map[byte]uint32{
	tar.TypeReg: unix.S_IFREG, tar.TypeDir: unix.S_IFDIR, tar.TypeSymlink: unix.S_IFLNK,
	tar.TypeChar: unix.S_IFCHR, tar.TypeBlock: unix.S_IFBLK, tar.TypeFifo: unix.S_IFIFO,
}

// matchHeader checks one unpacked node against the header that made it.
func matchHeader(n *node, me modelEntry, abs string) error {
	h := me.hdr
	var errs []string
	fail := func(format string, args ...any) { errs = append(errs, fmt.Sprintf(format, args...)) }
	if got, want := n.st.Mode&unix.S_IFMT, tarTypes[h.Typeflag]; got != want {
		return fmt.Errorf("type got %s, want %s", typeName(got), typeName(want))
	}
	if h.Typeflag != tar.TypeSymlink && int64(n.st.Mode&0o7777) != h.Mode {
		fail("mode got %04o, want %04o", n.st.Mode&0o7777, h.Mode)
	}
	if int(n.st.Uid) != h.Uid || int(n.st.Gid) != h.Gid {
		fail("owner got %d:%d, want %d:%d", n.st.Uid, n.st.Gid, h.Uid, h.Gid)
	}
	if want := unix.NsecToTimespec(h.ModTime.UnixNano()); n.st.Mtim != want {
		fail("mtime got %s, want %s", timeString(n.st.Mtim), timeString(want))
	}
	switch h.Typeflag {
	case tar.TypeSymlink:
		if n.target != h.Linkname {
			fail("target got %q, want %q", n.target, h.Linkname)
		}
	case tar.TypeChar, tar.TypeBlock:
		if maj, min := unix.Major(n.st.Rdev), unix.Minor(n.st.Rdev); int64(maj) != h.Devmajor || int64(min) != h.Devminor {
			fail("device got %d:%d, want %d:%d", maj, min, h.Devmajor, h.Devminor)
		}
	case tar.TypeReg:
		if err := matchContent(abs, me.entry); err != nil {
			fail("%v", err)
		}
	}
	want := map[string]string{}
	for k, v := range h.PAXRecords {
		if name, ok := strings.CutPrefix(k, "SCHILY.xattr."); ok && v != "" {
			want[name] = v
		}
	}
	if len(want) != len(n.xattrs) {
		fail("xattrs got %q, want %q", n.xattrs, want)
	}
	for k, v := range want {
		if n.xattrs[k] != v {
			fail("xattr %s got %q, want %q", k, n.xattrs[k], v)
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "; "))
	}
	return nil
}

func matchContent(abs string, e Entry) error {
	wh := sha256.New()
	if e.Data != nil {
		if err := e.Data(wh); err != nil {
			return err
		}
	}
	f, err := os.Open(abs)
	if err != nil {
		return err
	}
	defer f.Close()
	gh := sha256.New()
	if _, err := f.WriteTo(gh); err != nil {
		return err
	}
	if !bytes.Equal(gh.Sum(nil), wh.Sum(nil)) {
		return fmt.Errorf("content differs from the entry's data")
	}
	return nil
}
