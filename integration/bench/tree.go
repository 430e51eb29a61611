package bench

import (
	"archive/tar"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// WriteTreeTar writes the tree under dir as a layer tar: entries in
// lexical path order with relative names ("usr/", "usr/bin/python3"),
// owners, modes and mtimes (whole seconds) from the files, hardlinks as
// link entries to the first name, and no user or group names, access or
// change times. So the same tree always gives the same bytes.
func WriteTreeTar(w io.Writer, dir string) error {
	tw := tar.NewWriter(w)
	type fileID struct{ dev, ino uint64 }
	links := map[fileID]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		if fi.Mode()&fs.ModeSocket != 0 {
			return nil // tar cannot hold sockets; docker skips them too
		}
		var target string
		if fi.Mode()&fs.ModeSymlink != 0 {
			if target, err = os.Readlink(p); err != nil {
				return err
			}
		}
		hdr, err := tar.FileInfoHeader(fi, target)
		if err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		hdr.Name = filepath.ToSlash(rel)
		if fi.IsDir() {
			hdr.Name += "/"
		}
		hdr.Uname, hdr.Gname = "", ""
		hdr.AccessTime, hdr.ChangeTime = time.Time{}, time.Time{}
		hdr.ModTime = fi.ModTime().Truncate(1e9)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() && st.Nlink > 1 {
			id := fileID{uint64(st.Dev), st.Ino}
			if first, ok := links[id]; ok {
				hdr.Typeflag, hdr.Linkname, hdr.Size = tar.TypeLink, first, 0
			} else {
				links[id] = hdr.Name
			}
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		}
		if hdr.Typeflag != tar.TypeReg || hdr.Size == 0 {
			return nil
		}
		f, err := os.Open(p)
		if err != nil {
			return err
		}
		defer f.Close()
		if n, err := io.Copy(tw, f); err != nil {
			return fmt.Errorf("%s: %w", rel, err)
		} else if n != hdr.Size {
			return fmt.Errorf("%s: read %d bytes, stat said %d", rel, n, hdr.Size)
		}
		return nil
	})
	if err != nil {
		return err
	}
	return tw.Close()
}
