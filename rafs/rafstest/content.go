package rafstest

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
)

// content is a file body: its size and a function that streams it. Bodies
// are generated on the fly from seeds, never held in memory whole.
type content struct {
	size  int64
	write func(w io.Writer) error
}

// genBuf is the unit in which generated content is written.
const genBuf = 64 << 10

func bytesContent(b []byte) content {
	return content{size: int64(len(b)), write: func(w io.Writer) error {
		_, err := w.Write(b)
		return err
	}}
}

// randomContent is n incompressible bytes; equal seeds give equal prefixes.
func randomContent(seed uint64, n int64) content {
	return content{size: n, write: func(w io.Writer) error {
		return writeGen(w, n, newRandom(seed).Read)
	}}
}

// zeroContent is n zero bytes.
func zeroContent(n int64) content {
	return content{size: n, write: func(w io.Writer) error {
		return writeGen(w, n, func(p []byte) (int, error) {
			clear(p)
			return len(p), nil
		})
	}}
}

// chunkContent is a sequence of chunkSize blocks followed by tail random
// bytes. Block i is random from seeds[i], or all zero when seeds[i] is 0;
// repeating a seed repeats the block, which chunk-level dedup should find.
func chunkContent(chunkSize int, seeds []uint64, tailSeed uint64, tail int64) content {
	n := int64(chunkSize)*int64(len(seeds)) + tail
	return content{size: n, write: func(w io.Writer) error {
		for _, s := range seeds {
			c := zeroContent(int64(chunkSize))
			if s != 0 {
				c = randomContent(s, int64(chunkSize))
			}
			if err := c.write(w); err != nil {
				return err
			}
		}
		return randomContent(tailSeed, tail).write(w)
	}}
}

// mixedContent is n bytes that cycle through 256 KiB stretches of random
// bytes, English-like text, zeros and a four-letter alphabet, so that it
// compresses partly, like real binaries and data files do.
func mixedContent(seed uint64, n int64) content {
	return content{size: n, write: func(w io.Writer) error {
		r := newRandom(seed)
		var line int
		var pending bytes.Buffer
		var off int64
		return writeGen(w, n, func(p []byte) (int, error) {
			const stretch = 256 << 10
			for i := 0; i < len(p); {
				kind := (off / stretch) % 4
				m := min(int64(len(p)-i), stretch-off%stretch)
				q := p[i : i+int(m)]
				switch kind {
				case 0:
					r.Read(q)
				case 1:
					for pending.Len() < len(q) {
						fmt.Fprintf(&pending, "line %d: the quick brown fox %x jumps over the lazy dog\n", line, r.Uint64()&0xff)
						line++
					}
					pending.Read(q)
				case 2:
					clear(q)
				case 3:
					r.Read(q)
					for j := range q {
						q[j] = "ACGT"[q[j]&3]
					}
				}
				i += int(m)
				off += m
			}
			return len(p), nil
		})
	}}
}

func newRandom(seed uint64) *rand.ChaCha8 {
	var key [32]byte
	binary.LittleEndian.PutUint64(key[:], seed)
	copy(key[8:], "damselfly rafstest corpus")
	return rand.NewChaCha8(key)
}

// writeGen writes n bytes produced by fill, genBuf at a time.
func writeGen(w io.Writer, n int64, fill func([]byte) (int, error)) error {
	buf := make([]byte, min(n, genBuf))
	for n > 0 {
		p := buf[:min(n, int64(len(buf)))]
		if _, err := fill(p); err != nil {
			return err
		}
		if _, err := w.Write(p); err != nil {
			return err
		}
		n -= int64(len(p))
	}
	return nil
}
