package main

import (
	"context"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"

	"damselfly/rafs/image"
)

// fileList is the regular files of an image, in walk (lexical) order,
// which is also about the order of their chunks in the blobs.
type fileList struct {
	Paths []string
	Sizes []int64
	Bytes int64
}

func (l *fileList) add(p string, size int64) {
	l.Paths = append(l.Paths, p)
	l.Sizes = append(l.Sizes, size)
	l.Bytes += size
}

// listImage lists the regular files of the RAFS image ref from its
// bootstrap alone (no chunk is read).
func listImage(ctx context.Context, img *image.Image) (*fileList, error) {
	l := &fileList{}
	err := fs.WalkDir(img.FS(ctx), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		l.add(p, fi.Size())
		return nil
	})
	return l, err
}

// readFiles reads every file of files under root to the end with
// workers goroutines taking the next file in order, each with its own
// 1 MiB buffer, and returns the bytes read. The same reader serves the
// mount and the local disk.
func readFiles(ctx context.Context, root string, files []string, workers int) (int64, error) {
	var next atomic.Int64
	var total atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, 1<<20)
			for {
				i := int(next.Add(1) - 1)
				if i >= len(files) || ctx.Err() != nil {
					return
				}
				n, err := readFile(filepath.Join(root, files[i]), buf)
				total.Add(n)
				if err != nil {
					errs <- err
					next.Store(int64(len(files)))
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return total.Load(), err
	}
	return total.Load(), ctx.Err()
}

func readFile(p string, buf []byte) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	var n int64
	for {
		k, err := f.Read(buf)
		n += int64(k)
		if err == io.EOF {
			return n, nil
		}
		if err != nil {
			return n, fmt.Errorf("read %s: %w", p, err)
		}
	}
}

// dropCaches writes back dirty pages and drops the page cache, dentries
// and inodes (root only), so the next read comes from disk or the
// network.
func dropCaches() error {
	syscall.Sync()
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3\n"), 0o200); err != nil {
		return fmt.Errorf("drop caches (needs root): %w", err)
	}
	return nil
}
