package rafs

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"

	"damselfly/rafs/rafstest"
)

// countingReader counts the bytes read through it.
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// compressBootstrap compresses boot as the converter does.
func compressBootstrap(t testing.TB, boot []byte) []byte {
	t.Helper()
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(boot, nil)
}

// The fixture head is a real bootstrap: the refusals below come from the
// limits, not from a malformed superblock.
func TestBootstrapHeadDecodes(t *testing.T) {
	head := rafstest.BootstrapHead(320)
	b, err := Decode(head, OpenOptions{})
	if err != nil {
		t.Fatalf("Decode(BootstrapHead(320)): %v", err)
	}
	if err := b.Validate(); err != nil {
		t.Fatalf("Validate: %v", err)
	}
	data, err := ReadBootstrapLayer(bytes.NewReader(rafstest.ZstdBomb(head, 0)), ReadOptions{})
	if err != nil || !bytes.Equal(data, head) {
		t.Fatalf("ReadBootstrapLayer(ZstdBomb(head, 0)): got %d bytes, %v; want the head back", len(data), err)
	}
}

// Bootstrap bombs: layers of at most a few hundred KiB that inflate to
// gigabytes, or whose headers ask for gigabytes. Each is refused with a
// clear error after reading a small part of the layer, and refusing it
// allocates nothing near what it declares or inflates to.
func TestReadBootstrapLayerRefusesBombs(t *testing.T) {
	const gib = 1 << 30
	honest := rafstest.BootstrapHead(320)
	declares := func(n uint64) []byte { return rafstest.BootstrapHead(n) }
	cases := []struct {
		name  string
		layer []byte
		opts  ReadOptions
		want  error
		msg   string // in the error
		alloc uint64 // most bytes refusing may allocate
	}{
		{"declares 4 GiB", rafstest.ZstdBomb(declares(4*gib), 6*gib), ReadOptions{}, ErrTooLarge,
			"limit is " + strconv.Itoa(DefaultMaxBootstrapSize), 1 << 20},
		{"declares 1 GiB over a 64 MiB limit", rafstest.ZstdBomb(declares(gib), 6*gib), ReadOptions{MaxSize: 64 << 20}, ErrTooLarge,
			"limit is 67108864", 1 << 20},
		{"6 GiB of zeros past an honest superblock", rafstest.ZstdBomb(honest, 6*gib), ReadOptions{}, ErrCorrupt,
			"past the 320 bytes its superblock declares", 1 << 20},
		{"6 GiB of zeros, no superblock", rafstest.ZstdBomb(nil, 6*gib), ReadOptions{}, ErrCorrupt,
			"bad magic", 1 << 20},
		{"declares 500 MiB, under the limit, 6 GiB of zeros", rafstest.ZstdBomb(declares(500<<20), 6*gib), ReadOptions{}, ErrCorrupt,
			"more than 256x", 4*ratioSlack + 1<<20},
		{"declares the 8 MiB limit, 6 GiB of zeros", rafstest.ZstdBomb(declares(8<<20), 6*gib), ReadOptions{MaxSize: 8 << 20}, ErrCorrupt,
			"more than 256x", 4*ratioSlack + 1<<20},
		{"superblock says other than the manifest", rafstest.ZstdBomb(declares(64<<20), 6*gib), ReadOptions{ExpectSize: 320}, ErrCorrupt,
			"the manifest says 320", 1 << 20},
		{"window of 512 MiB", rafstest.ZstdWindowBomb(29, false), ReadOptions{}, zstd.ErrWindowSizeExceeded,
			"superblock", 1 << 20},
		{"single segment of 4 GiB", rafstest.ZstdWindowBomb(32, true), ReadOptions{}, zstd.ErrDecoderSizeExceeded,
			"superblock", 1 << 20},
	}
	// Warm up the decoder's pools, so that they are not counted.
	if _, err := ReadBootstrapLayer(bytes.NewReader(rafstest.ZstdBomb(honest, 0)), ReadOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			in := &countingReader{r: bytes.NewReader(tc.layer)}
			before := allocBytes()
			start := time.Now()
			_, err := ReadBootstrapLayer(in, tc.opts)
			took := time.Since(start)
			grew := allocBytes() - before
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error wrapping %v and saying %q", err, tc.want, tc.msg)
			}
			if grew > tc.alloc {
				t.Errorf("refusing allocated %d bytes, want at most %d", grew, tc.alloc)
			}
			// The proxy for "fast" that does not depend on the machine:
			// the reader stopped within the first part of the layer.
			if in.n > 64<<10 && in.n > int64(len(tc.layer))/4 {
				t.Errorf("read %d of the layer's %d bytes before refusing, want the first 64 KiB or a quarter", in.n, len(tc.layer))
			}
			t.Logf("%d-byte layer refused in %v after reading %d bytes, allocating %d: %v", len(tc.layer), took, in.n, grew, err)
		})
	}
}

// A stream that is not compressed is bounded the same way, whatever
// length it has or claims.
func TestReadBootstrap(t *testing.T) {
	good := seedBootstraps(t)[0]
	head := rafstest.BootstrapHead(320)
	for _, tc := range []struct {
		name string
		in   []byte
		opts ReadOptions
		want error
		msg  string
	}{
		{"good", good, ReadOptions{}, nil, ""},
		{"good, size expected", good, ReadOptions{ExpectSize: int64(len(good))}, nil, ""},
		{"good at exactly the limit", good, ReadOptions{MaxSize: int64(len(good))}, nil, ""},
		{"one byte over the limit", good, ReadOptions{MaxSize: int64(len(good)) - 1}, ErrTooLarge, "superblock declares"},
		{"empty", nil, ReadOptions{}, ErrCorrupt, "after 0 bytes, inside the 256-byte superblock"},
		{"superblock cut", good[:100], ReadOptions{}, ErrCorrupt, "after 100 bytes"},
		{"body cut", good[:len(good)-1], ReadOptions{}, ErrCorrupt, "ends after"},
		{"one byte too many", append(bytes.Clone(good), 0), ReadOptions{}, ErrCorrupt, "goes on past"},
		{"declares less than a superblock", rafstest.BootstrapHead(100), ReadOptions{}, ErrCorrupt, "less than itself"},
		{"section past the declared end", append(rafstest.BootstrapHead(300), make([]byte, 20)...)[:300], ReadOptions{}, ErrCorrupt, "section"},
		{"bad magic", append([]byte("XXXXXXXX"), head[8:]...), ReadOptions{}, ErrCorrupt, "bad magic"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			data, err := ReadBootstrap(bytes.NewReader(tc.in), tc.opts)
			if tc.want == nil {
				if err != nil || !bytes.Equal(data, tc.in) {
					t.Fatalf("got %d bytes, %v; want the %d bytes back", len(data), err, len(tc.in))
				}
				return
			}
			if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
				t.Fatalf("got %v, want an error wrapping %v and saying %q", err, tc.want, tc.msg)
			}
		})
	}
	// A read error is passed on, wrapped.
	boom := errors.New("boom")
	r := io.MultiReader(bytes.NewReader(good[:1000]), &errReader{boom})
	if _, err := ReadBootstrap(r, ReadOptions{}); !errors.Is(err, boom) {
		t.Errorf("read error: got %v, want it wrapped", err)
	}
	// The converter's own layers read back whole, big or small.
	big := append(rafstest.BootstrapHead(9<<20), randBytes(9, 9<<20-320)...)
	for _, boot := range [][]byte{good, head, big} {
		data, err := ReadBootstrapLayer(bytes.NewReader(compressBootstrap(t, boot)), ReadOptions{})
		if err != nil || !bytes.Equal(data, boot) {
			t.Errorf("%d-byte bootstrap through zstd: got %d bytes, %v", len(boot), len(data), err)
		}
	}
}

// Uncompressed, a stream is read up to the size its superblock declares
// and no further, with the buffer grown only as bytes arrive.
func TestReadBootstrapBoundedByDeclaredSize(t *testing.T) {
	const limit = 8 << 20
	for _, declared := range []uint64{limit, 1 << 20, 320} {
		zeros := io.MultiReader(bytes.NewReader(rafstest.BootstrapHead(declared)), endlessZeros{})
		before := allocBytes()
		_, err := ReadBootstrap(zeros, ReadOptions{MaxSize: limit})
		grew := allocBytes() - before
		if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "goes on past") {
			t.Errorf("declares %d: got %v, want ErrCorrupt for a stream going on past it", declared, err)
		}
		if grew > 2*declared+firstReadSize+4<<10 {
			t.Errorf("declares %d: allocated %d bytes, want at most twice that plus %d", declared, grew, firstReadSize+4<<10)
		}
	}
	// A stream that stops early allocates for what came, not for what
	// was declared.
	before := allocBytes()
	_, err := ReadBootstrap(io.MultiReader(bytes.NewReader(rafstest.BootstrapHead(limit)), io.LimitReader(endlessZeros{}, 100<<10)), ReadOptions{MaxSize: limit})
	if grew := allocBytes() - before; grew > 512<<10 {
		t.Errorf("100 KiB of a declared 8 MiB: allocated %d bytes", grew)
	}
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "ends after") {
		t.Errorf("100 KiB of a declared 8 MiB: got %v, want ErrCorrupt", err)
	}
}

type endlessZeros struct{}

func (endlessZeros) Read(p []byte) (int, error) {
	clear(p)
	return len(p), nil
}

// MaxLayerSize holds the layer of a bootstrap that does not compress at
// all, at the limit.
func TestMaxLayerSize(t *testing.T) {
	for _, n := range []int{1 << 20, 1<<20 + 12345} {
		opts := ReadOptions{MaxSize: int64(n)}
		if got := len(compressBootstrap(t, randBytes(uint64(n), n))); int64(got) > opts.MaxLayerSize() {
			t.Errorf("%d random bytes compress to %d, over MaxLayerSize %d", n, got, opts.MaxLayerSize())
		}
	}
	if got := (ReadOptions{}).Limit(); got != DefaultMaxBootstrapSize {
		t.Errorf("default limit %d, want %d", got, DefaultMaxBootstrapSize)
	}
	if got := (ReadOptions{MaxSize: 8 << 30}).Limit(); got != MaxBootstrapSize {
		t.Errorf("limit over the format's: got %d, want %d", got, MaxBootstrapSize)
	}
}

type errReader struct{ err error }

func (e *errReader) Read([]byte) (int, error) { return 0, e.err }

// FuzzReadBootstrapLayer: whatever the layer holds, reading it returns a
// bootstrap that Decode accepts as to size, or an error, and never panics.
func FuzzReadBootstrapLayer(f *testing.F) {
	for _, s := range seedBootstraps(f) {
		f.Add(compressBootstrap(f, s))
	}
	f.Add(rafstest.ZstdBomb(rafstest.BootstrapHead(320), 1<<20))
	f.Add(rafstest.ZstdBomb(rafstest.BootstrapHead(1<<20), 1<<20))
	f.Add(rafstest.ZstdBomb(rafstest.BootstrapHead(4<<30), 1<<20))
	f.Add(rafstest.ZstdWindowBomb(29, false))
	f.Add(rafstest.ZstdWindowBomb(32, true))
	f.Fuzz(func(t *testing.T, layer []byte) {
		data, err := ReadBootstrapLayer(bytes.NewReader(layer), ReadOptions{MaxSize: 4 << 20})
		if err != nil {
			return
		}
		if len(data) < superblockSize || len(data) > 4<<20 || le.Uint64(data[32:]) != uint64(len(data)) {
			t.Fatalf("got %d bytes declaring %d", len(data), le.Uint64(data[32:]))
		}
		if b, err := Decode(data, OpenOptions{SkipChecksum: true}); err == nil {
			exercise(b)
		}
	})
}
