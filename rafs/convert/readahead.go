package convert

import (
	"context"
	"io"
	"sync"
)

// readahead reads src in its own goroutine, up to depth blocks ahead of
// the consumer, so decompression overlaps with parsing and chunking.
type readahead struct {
	blocks chan []byte
	free   chan []byte
	errc   chan error
	cur    []byte
	blk    []byte // the block cur points into
	err    error
	stop   chan struct{}
	once   sync.Once
	done   chan struct{}
}

func newReadahead(ctx context.Context, src io.Reader, block, depth int) *readahead {
	r := &readahead{
		blocks: make(chan []byte, depth),
		free:   make(chan []byte, depth+2),
		errc:   make(chan error, 1),
		stop:   make(chan struct{}),
		done:   make(chan struct{}),
	}
	for range depth + 2 {
		r.free <- make([]byte, block)
	}
	go func() {
		defer close(r.done)
		defer close(r.blocks)
		for {
			var buf []byte
			select {
			case buf = <-r.free:
			case <-r.stop:
				return
			case <-ctx.Done():
				r.errc <- ctx.Err()
				return
			}
			n, err := fill(src, buf[:cap(buf)])
			if n > 0 {
				select {
				case r.blocks <- buf[:n]:
				case <-r.stop:
					return
				}
			}
			if err != nil {
				r.errc <- err
				return
			}
		}
	}()
	return r
}

// fill reads until buf is full or src fails, and returns src's error as
// is. Unlike io.ReadFull it keeps io.EOF (the end) apart from
// io.ErrUnexpectedEOF, which a decompressor returns for a truncated
// stream and which must reach the consumer as an error.
func fill(src io.Reader, buf []byte) (int, error) {
	n := 0
	for n < len(buf) {
		m, err := src.Read(buf[n:])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (r *readahead) Read(p []byte) (int, error) {
	for len(r.cur) == 0 {
		if r.err != nil {
			return 0, r.err
		}
		buf, ok := <-r.blocks
		if !ok {
			select {
			case r.err = <-r.errc:
			default:
				r.err = io.ErrClosedPipe
			}
			continue
		}
		r.cur, r.blk = buf, buf
	}
	n := copy(p, r.cur)
	r.cur = r.cur[n:]
	if len(r.cur) == 0 {
		select {
		case r.free <- r.blk[:cap(r.blk)]:
		default:
		}
	}
	return n, nil
}

// Close stops the goroutine and waits for it.
func (r *readahead) Close() {
	r.once.Do(func() { close(r.stop) })
	<-r.done
}
