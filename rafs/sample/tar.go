package sample

import (
	"archive/tar"
	"errors"
	"fmt"
	"io"
)

// ErrShortData reports that an entry's Data wrote fewer bytes than its header
// promised; it is a bug in the entry unless the entry sets Truncate.
var ErrShortData = errors.New("data shorter than header size")

// WriteLayerTar writes l to w as an uncompressed tar stream, header by header
// and streaming each body, so memory use does not grow with file sizes. An
// entry with Truncate ends the stream early, on purpose, with no error.
func WriteLayerTar(w io.Writer, l Layer) error {
	tw := tar.NewWriter(w)
	for i := range l {
		e := &l[i]
		h := e.Hdr
		if err := tw.WriteHeader(&h); err != nil {
			return fmt.Errorf("write header of entry %d %q: %w", i, h.Name, err)
		}
		if e.Data != nil {
			cw := &countWriter{w: tw}
			if err := e.Data(cw); err != nil {
				return fmt.Errorf("write data of entry %d %q: %w", i, h.Name, err)
			}
			if e.Truncate {
				// tar.Writer does not buffer: what was written is on w.
				return nil
			}
			if cw.n != h.Size {
				return fmt.Errorf("entry %d %q: wrote %d of %d bytes: %w", i, h.Name, cw.n, h.Size, ErrShortData)
			}
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("close tar: %w", err)
	}
	return nil
}

// countWriter counts the bytes written through it.
type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}
