package main

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
)

// Workloads (-workloads): what the reader on every node reads.
const (
	workloadAll     = "all"     // every regular file of the image
	workloadStartup = "startup" // the startup subset
)

// readerMain is the reader process (-reader-list): it reads every file
// the list names, relative to root, to the end, with workers goroutines
// taking the next file in order, prints "read N files, B bytes" and
// exits; any error is fatal. The benchmark runs it in each node's
// namespace, so that its CPU time is the node's.
func readerMain(ctx context.Context, list, root string, workers int) error {
	f, err := os.Open(list)
	if err != nil {
		return err
	}
	var files []string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if p := strings.TrimSpace(sc.Text()); p != "" {
			files = append(files, p)
		}
	}
	f.Close()
	if err := sc.Err(); err != nil {
		return err
	}
	var next, total atomic.Int64
	var once sync.Once
	var first error
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(func() {
			buf := make([]byte, 1<<20)
			for ctx.Err() == nil {
				i := int(next.Add(1) - 1)
				if i >= len(files) {
					return
				}
				n, err := readFile(filepath.Join(root, files[i]), buf)
				total.Add(n)
				if err != nil {
					once.Do(func() { first = err })
					next.Store(int64(len(files)))
					return
				}
			}
		})
	}
	wg.Wait()
	if first == nil {
		first = ctx.Err()
	}
	if first != nil {
		return first
	}
	fmt.Printf("read %d files, %d bytes\n", len(files), total.Load())
	return nil
}

func readFile(p string, buf []byte) (int64, error) {
	f, err := os.Open(p)
	if err != nil {
		return 0, err
	}
	defer f.Close()
	n, err := io.CopyBuffer(io.Discard, struct{ io.Reader }{f}, buf)
	if err != nil {
		return n, fmt.Errorf("read %s: %w", p, err)
	}
	return n, nil
}

// writeList writes paths one a line.
func writeList(file string, paths []string) error {
	return os.WriteFile(file, []byte(strings.Join(paths, "\n")+"\n"), 0o644)
}
