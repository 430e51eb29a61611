package fusemount

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"damselfly/rafs"
)

// slowBlobs serves blob ranges from a directory after a fixed delay per
// request: a registry one round trip away, without the network.
type slowBlobs struct {
	dir   *rafs.DirBlobs
	delay time.Duration
}

func (s slowBlobs) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	select {
	case <-time.After(s.delay):
	case <-ctx.Done():
		return SourceRegistry, ctx.Err()
	}
	return SourceRegistry, s.dir.ReadBlob(ctx, blob, off, p)
}

// The cold sequential read benchmark: one reader reads a 32 MiB file of
// 1 MiB chunks in 128 KiB reads, as the kernel sends them, through the
// Fetcher with no node cache, from a backend that answers each request
// after a delay (2 ms and 20 ms, the harness's two links' round trips),
// with readahead off and with the default 4 chunks, in the same
// iteration. Reported: MB/s for each and the speed-up.
func BenchmarkColdSequentialRead(b *testing.B) {
	const fileSize = 32 << 20
	boot, blobs := buildTextImage(b, 1, fileSize)
	in, err := boot.LookupPath("file0")
	if err != nil {
		b.Fatal(err)
	}
	dir := rafs.NewDirBlobs(blobs)
	defer dir.Close()
	for _, delay := range []time.Duration{2 * time.Millisecond, 20 * time.Millisecond} {
		b.Run(fmt.Sprintf("rtt=%v", delay), func(b *testing.B) {
			be := slowBlobs{dir: dir, delay: delay}
			var took [2]time.Duration
			for range b.N {
				for i, ra := range []int{0, 4} {
					f, err := NewFetcher(boot, nil, be, FetcherConfig{ReadaheadChunks: ra}, nil, slog.New(slog.DiscardHandler))
					if err != nil {
						b.Fatal(err)
					}
					start := time.Now()
					if err := readSequential(f, boot, in); err != nil {
						b.Fatal(err)
					}
					took[i] += time.Since(start)
					f.Close()
				}
			}
			mb := float64(fileSize) * float64(b.N) / 1e6
			b.ReportMetric(mb/took[0].Seconds(), "off-MB/s")
			b.ReportMetric(mb/took[1].Seconds(), "readahead-MB/s")
			b.ReportMetric(took[0].Seconds()/took[1].Seconds(), "speedup")
		})
	}
}

// readSequential reads file in from start to end through f in 128 KiB
// reads, starting readahead where the FUSE adapter would.
func readSequential(f *Fetcher, boot *rafs.Bootstrap, in rafs.Inode) error {
	const readSize = 128 << 10
	var seq seqTracker
	buf := make([]byte, readSize)
	cs := uint64(boot.ChunkSize())
	for off := uint64(0); off < in.Size; off += readSize {
		n := min(readSize, in.Size-off)
		if last, ok := seq.advance(off, n, cs); ok {
			f.Readahead(in, last)
		}
		seg, err := boot.FileSegment(in, uint32(off/cs))
		if err != nil {
			return err
		}
		if err := f.ReadChunkAt(context.Background(), seg.Chunk, int(seg.Off)+int(off%cs), buf[:n]); err != nil {
			return err
		}
	}
	return nil
}
