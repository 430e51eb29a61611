package fusemount

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/erofs"
)

// kernelImages is the store of kernel images: for a RAFS image whose
// every chunk is on the node, the EROFS image of its whole tree
// (rafs/erofs), file bytes decoded, which the kernel mounts and reads
// with no daemon on the path of any read, lookup or open. The node cache
// keeps the compressed chunks for peers as before; a kernel image is an
// extra copy, about the image's unpacked size, bounded by capacity.
//
// Layout: DIR/<name>.erofs, the image, and DIR/<name>.state, a record of
// the image file's device, inode, size and change time taken once it was
// complete, synced and renamed into place. name is the hex SHA-256 of the
// bootstrap (which the manifest pins). An image is used only while its
// file matches its record: any write, truncate, chmod or rename changes
// the change time, which nobody can set back, so a matching file holds
// the bytes this daemon wrote from verified chunks. Anything else is
// deleted and built again. The directory is the mounting user's alone
// (0700), as the node cache's is.
//
// The least recently mounted images beyond capacity are deleted when a
// new one is built; a mounted image stays readable (the kernel holds it).
type kernelImages struct {
	dir      string
	capacity int64
	log      *slog.Logger
}

const (
	kernelImageExt = ".erofs"
	kernelStateExt = ".state"
	kernelTempMark = ".tmp-"
	// kernelStateVersion starts every state record.
	kernelStateVersion = "damselfly kernel image v1"
)

func openKernelImages(dir string, capacity int64, log *slog.Logger) (*kernelImages, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("kernel images: %w", err)
	}
	var st unix.Stat_t
	if err := unix.Lstat(dir, &st); err != nil {
		return nil, fmt.Errorf("kernel images: %w", err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR || int(st.Uid) != os.Geteuid() || st.Mode&0o022 != 0 {
		return nil, fmt.Errorf("kernel images: %s must be a directory of uid %d that no one else may write (mode %#o, uid %d)",
			dir, os.Geteuid(), st.Mode&0o7777, st.Uid)
	}
	return &kernelImages{dir: dir, capacity: capacity, log: log}, nil
}

// kernelImageName names b's kernel image.
func kernelImageName(b *rafs.Bootstrap) string {
	h := sha256.New()
	h.Write([]byte(kernelStateVersion + "\x00"))
	h.Write(b.Bytes())
	return hex.EncodeToString(h.Sum(nil))
}

func (k *kernelImages) path(name, ext string) string { return filepath.Join(k.dir, name+ext) }

// fileState is what a state record holds of the image file.
func fileState(path string) (string, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return "", err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		return "", fmt.Errorf("%s is not a regular file", path)
	}
	return fmt.Sprintf("%s dev=%d ino=%d size=%d ctime=%d.%09d\n",
		kernelStateVersion, st.Dev, st.Ino, st.Size, st.Ctim.Sec, st.Ctim.Nsec), nil
}

// find returns the path of name's complete, unchanged image, or "" when
// there is none. A changed one is deleted.
func (k *kernelImages) find(name string) string {
	img, stp := k.path(name, kernelImageExt), k.path(name, kernelStateExt)
	want, err := os.ReadFile(stp)
	if err != nil {
		return ""
	}
	got, err := fileState(img)
	if err != nil || got != string(want) {
		k.log.Warn("kernel image changed since it was written; deleting it", "image", img, "err", err)
		os.Remove(stp)
		os.Remove(img)
		return ""
	}
	now := time.Now()
	_ = os.Chtimes(stp, now, now) // recency, for eviction
	return img
}

// build writes im, reading file bytes from src, as name's image and
// returns its path. Older images beyond the capacity are deleted first.
func (k *kernelImages) build(ctx context.Context, name string, im *erofs.Image, src rafs.ChunkSource) (string, error) {
	if im.Size() > k.capacity {
		return "", fmt.Errorf("kernel image of %d bytes exceeds the capacity of %d", im.Size(), k.capacity)
	}
	k.evict(k.capacity - im.Size())
	f, err := os.CreateTemp(k.dir, kernelTempMark+"*")
	if err != nil {
		return "", fmt.Errorf("kernel image: %w", err)
	}
	tmp := f.Name()
	defer os.Remove(tmp) // a no-op once renamed
	if _, err := im.WriteTo(ctx, f, src); err != nil {
		f.Close()
		return "", fmt.Errorf("kernel image: %w", err)
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return "", fmt.Errorf("kernel image: %w", err)
	}
	img, stp := k.path(name, kernelImageExt), k.path(name, kernelStateExt)
	if err := os.Rename(tmp, img); err != nil {
		return "", fmt.Errorf("kernel image: %w", err)
	}
	state, err := fileState(img)
	if err != nil {
		return "", fmt.Errorf("kernel image: %w", err)
	}
	if err := writeFileAtomic(stp, []byte(state)); err != nil {
		os.Remove(img)
		return "", fmt.Errorf("kernel image state: %w", err)
	}
	return img, nil
}

// writeFileAtomic writes data to path by a synced temp file renamed
// over it.
func writeFileAtomic(path string, data []byte) error {
	f, err := os.CreateTemp(filepath.Dir(path), kernelTempMark+"*")
	if err != nil {
		return err
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := errors.Join(f.Sync(), f.Close()); err != nil {
		return err
	}
	return os.Rename(f.Name(), path)
}

// evict deletes the least recently used images (and leftover temp files
// older than an hour) until the images left take at most keep bytes.
func (k *kernelImages) evict(keep int64) {
	ents, err := os.ReadDir(k.dir)
	if err != nil {
		k.log.Warn("kernel images: list", "dir", k.dir, "err", err)
		return
	}
	type image struct {
		name string
		size int64
		used time.Time
	}
	var imgs []image
	var total int64
	for _, e := range ents {
		n := e.Name()
		fi, err := e.Info()
		if err != nil {
			continue
		}
		switch {
		case strings.HasPrefix(n, kernelTempMark):
			if time.Since(fi.ModTime()) > copyTempMaxAge {
				os.Remove(filepath.Join(k.dir, n))
			}
		case strings.HasSuffix(n, kernelStateExt):
			name := strings.TrimSuffix(n, kernelStateExt)
			ifi, err := os.Lstat(k.path(name, kernelImageExt))
			if err != nil {
				os.Remove(filepath.Join(k.dir, n))
				continue
			}
			imgs = append(imgs, image{name, ifi.Size(), fi.ModTime()})
			total += ifi.Size()
		}
	}
	sort.Slice(imgs, func(i, j int) bool { return imgs[i].used.Before(imgs[j].used) })
	for _, im := range imgs {
		if total <= keep {
			break
		}
		os.Remove(k.path(im.name, kernelStateExt))
		os.Remove(k.path(im.name, kernelImageExt))
		total -= im.size
		k.log.Info("kernel image evicted", "image", im.name, "bytes", im.size)
	}
}

// allLocal reports whether the node cache holds every chunk of b.
func allLocal(b *rafs.Bootstrap, c *cache.Cache) bool {
	for i := range b.ChunkCount() {
		ck, err := b.Chunk(i)
		if err != nil || !c.Has(cache.KeyOf(ck)) {
			return false
		}
	}
	return true
}
