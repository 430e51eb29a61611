package peer

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"log"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	gcrregistry "github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"

	"damselfly/fusemount"
	"damselfly/fusemount/backend"
	"damselfly/integration/bench/shaper"
	"damselfly/peer/exchange"
	dhost "damselfly/peer/host"
	"damselfly/proxy"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
	"damselfly/scheduler"
)

// The cold read benchmark: a whole image read through the mount's read
// path (fusemount.Fetcher with an empty node cache, amplify_io the
// daemon's default of 1 MiB or 4 MiB) by 1 or 4 readers, from
//
//	a   the registry directly (the backend without a proxy);
//	b   the local peer (peer.Node behind proxy.Server, as peer/daemon
//	    builds them), the chunks coming from the same registry;
//	b2  as b, but with a backend that does not pass the peer client's
//	    verified decoded bytes on, so the fetcher decodes and hashes
//	    every chunk a second time (the read path before it did);
//	c   the local peer, the chunks coming from another peer over libp2p
//	    (it read the image from the registry first, untimed).
//
// The registry is go-containerregistry's in-process registry on
// loopback. Every pass starts from fresh caches, peers, scheduler and
// connections; the passes of one iteration run in a rotating order.
// Reported: MB/s of image content per path, the time ratios b/a, b2/a,
// c/a, and the latency of each chunk read (p50, p99, in ms).
func BenchmarkColdRead(b *testing.B) {
	img := buildBenchImage(b, 64<<20)
	coldReadVariants(b, img, startBenchRegistry(b, img))
}

// BenchmarkColdReadLink is BenchmarkColdRead with the registry behind a
// shaped link of 1 Gbit/s and 2 ms RTT (bench-mount's 1g profile), as a
// registry is in use: across a network. Unshaped, the in-process
// registry answers at memory speed and the comparison measures only the
// CPU the peer path adds on this machine.
func BenchmarkColdReadLink(b *testing.B) {
	img := buildBenchImage(b, 64<<20)
	px, err := shaper.New(startBenchRegistry(b, img), shaper.Config{Bandwidth: 1e9, RTT: 2 * time.Millisecond})
	if err != nil {
		b.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- px.Run(ctx) }()
	b.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	})
	coldReadVariants(b, img, px.Addr())
}

func coldReadVariants(b *testing.B, img benchImage, host string) {
	for _, v := range []struct{ readers, amplify int }{{1, 1 << 20}, {1, 4 << 20}, {4, 1 << 20}} {
		b.Run(fmt.Sprintf("readers=%d/amplify=%dMiB", v.readers, v.amplify>>20), func(b *testing.B) {
			benchColdRead(b, img, host, readOptions{readers: v.readers, amplify: v.amplify})
		})
	}
}

// readOptions say how a pass reads the image.
type readOptions struct {
	readers int // goroutines, each reading a contiguous share in order
	amplify int // the Fetcher's AmplifyIO
}

const benchRepo = "bench/image"

// benchPath is one way of reading the image, with its totals.
type benchPath struct {
	name    string
	run     func(b *testing.B, img benchImage, host string, o readOptions) (time.Duration, []time.Duration)
	elapsed time.Duration
	lat     []time.Duration
}

func benchColdRead(b *testing.B, img benchImage, host string, o readOptions) {
	paths := []*benchPath{
		{name: "a", run: readFromRegistry},
		{name: "b", run: func(b *testing.B, img benchImage, host string, o readOptions) (time.Duration, []time.Duration) {
			return readThroughPeer(b, img, host, o, false, true)
		}},
		{name: "b2", run: func(b *testing.B, img benchImage, host string, o readOptions) (time.Duration, []time.Duration) {
			return readThroughPeer(b, img, host, o, false, false)
		}},
		{name: "c", run: func(b *testing.B, img benchImage, host string, o readOptions) (time.Duration, []time.Duration) {
			return readThroughPeer(b, img, host, o, true, true)
		}},
	}
	b.ResetTimer()
	b.StopTimer()
	for i := range b.N {
		for j := range paths {
			p := paths[(i+j)%len(paths)]
			d, lat := p.run(b, img, host, o)
			p.elapsed += d
			p.lat = append(p.lat, lat...)
		}
	}
	mb := float64(img.size) * float64(b.N) / 1e6
	for _, p := range paths {
		b.ReportMetric(mb/p.elapsed.Seconds(), p.name+"-MB/s")
		slices.Sort(p.lat)
		b.ReportMetric(ms(percentile(p.lat, 0.50)), p.name+"-p50-ms")
		b.ReportMetric(ms(percentile(p.lat, 0.99)), p.name+"-p99-ms")
	}
	for _, p := range paths[1:] {
		b.ReportMetric(p.elapsed.Seconds()/paths[0].elapsed.Seconds(), p.name+"/a")
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func percentile(sorted []time.Duration, q float64) time.Duration {
	if len(sorted) == 0 {
		return 0
	}
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

// benchImage is a one-blob RAFS image in default-size (1 MiB) chunks,
// about half of its content compressible.
type benchImage struct {
	boot   *rafs.Bootstrap
	blob   rafs.Blob
	data   []byte       // the blob
	chunks []rafs.Chunk // by index
	size   int64        // content bytes
}

func buildBenchImage(b *testing.B, size int) benchImage {
	b.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	const files = 8
	for i := range files {
		data := randBytes(uint64(100+i), size/files)
		h := &tar.Header{Name: fmt.Sprintf("file%d", i), Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(data)),
			ModTime: time.Unix(1700000000, 0)}
		if err := tw.WriteHeader(h); err != nil {
			b.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			b.Fatal(err)
		}
	}
	if err := tw.Close(); err != nil {
		b.Fatal(err)
	}
	dir := b.TempDir()
	layer := rafs.LayerSource{Name: "layer0", Open: func(context.Context) (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(buf.Bytes())), nil
	}}
	res, err := rafs.Build(b.Context(), []rafs.LayerSource{layer}, rafs.BuildOptions{BlobDir: dir})
	if err != nil {
		b.Fatal(err)
	}
	boot, err := rafs.Decode(res.Bootstrap, rafs.OpenOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if len(res.Blobs) != 1 {
		b.Fatalf("got %d blobs, want 1", len(res.Blobs))
	}
	img := benchImage{boot: boot}
	if img.blob, err = boot.Blob(0); err != nil {
		b.Fatal(err)
	}
	if img.data, err = os.ReadFile(rafs.BlobPath(dir, img.blob.Digest)); err != nil {
		b.Fatal(err)
	}
	for i := range boot.ChunkCount() {
		c, err := boot.Chunk(i)
		if err != nil {
			b.Fatal(err)
		}
		img.chunks = append(img.chunks, c)
		img.size += int64(c.Size)
	}
	return img
}

// startBenchRegistry serves img's blob from an in-process registry on
// loopback and returns its host:port.
func startBenchRegistry(b *testing.B, img benchImage) string {
	b.Helper()
	mem := gcrregistry.NewInMemoryBlobHandler()
	h := v1.Hash{Algorithm: "sha256", Hex: fmt.Sprintf("%x", img.blob.Digest[:])}
	if err := mem.(gcrregistry.BlobPutHandler).Put(b.Context(), benchRepo, h, io.NopCloser(bytes.NewReader(img.data))); err != nil {
		b.Fatal(err)
	}
	srv := httptest.NewServer(gcrregistry.New(gcrregistry.Logger(log.New(io.Discard, "", 0)), gcrregistry.WithBlobHandler(mem)))
	b.Cleanup(srv.Close)
	return strings.TrimPrefix(srv.URL, "http://")
}

// readFromRegistry is path a.
func readFromRegistry(b *testing.B, img benchImage, host string, o readOptions) (time.Duration, []time.Duration) {
	cfg := backend.Default()
	cfg.Host, cfg.Repo = host, benchRepo
	be, err := backend.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	return readImage(b, img, mountBackend{be}, b.TempDir(), o)
}

// readThroughPeer is paths b (fromPeer false) and c (true); decoded
// false is b2.
func readThroughPeer(b *testing.B, img benchImage, host string, o readOptions, fromPeer, decoded bool) (time.Duration, []time.Duration) {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	st, key := newScheduler(b), clusterKey(b)
	originURL := "http://" + host
	if fromPeer {
		holder := startBenchPeer(b, key, st, originURL)
		defer holder.stop()
		ref := registry.Ref{Registry: originURL, Repo: benchRepo}
		if err := readAll(ctx, holder.node, ref, img.blob.Digest, img.chunks); err != nil {
			b.Fatalf("the holding peer's read: %v", err)
		}
	}
	local := startBenchPeer(b, key, st, originURL)
	defer local.stop()
	cfg := backend.Default()
	cfg.Host, cfg.Repo = host, benchRepo
	cfg.Proxy = backend.ProxyConfig{URL: local.url, Fallback: true, CheckInterval: time.Hour}
	be, err := backend.New(cfg)
	if err != nil {
		b.Fatal(err)
	}
	defer be.Close()
	var mb fusemount.Backend = mountBackend{be}
	if !decoded {
		mb = mountBackendNoDecoded{be}
	}
	// The mount and its peer share the node cache.
	d, lat := readImage(b, img, mb, local.cacheDir, o)
	s := local.node.Stats()
	if st := be.Stats(); st.Registry.Bytes != 0 {
		b.Fatalf("the mount read %d bytes from the registry directly: the local peer was not used", st.Registry.Bytes)
	}
	if fromPeer && s.OriginBytes != 0 || !fromPeer && s.PeerBytes != 0 {
		b.Fatalf("local peer: %d bytes from peers, %d from the origin; want all from the %s", s.PeerBytes, s.OriginBytes,
			map[bool]string{true: "other peer", false: "origin"}[fromPeer])
	}
	return d, lat
}

// readImage reads every chunk of img through a new Fetcher over be with
// an empty node cache in cacheDir: readers goroutines each read a
// contiguous share of the chunks in order. It returns the time taken
// and each chunk read's latency.
func readImage(b *testing.B, img benchImage, be fusemount.Backend, cacheDir string, o readOptions) (time.Duration, []time.Duration) {
	c, err := cache.Open(cache.Default(cacheDir))
	if err != nil {
		b.Fatal(err)
	}
	defer c.Close()
	f, err := fusemount.NewFetcher(img.boot, c, be, fusemount.FetcherConfig{AmplifyIO: o.amplify, MemoryBytes: fusemount.DefaultConfig().MemoryBytes},
		nil, slog.New(slog.DiscardHandler))
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	readers := o.readers
	lats := make([][]time.Duration, readers)
	errs := make([]error, readers)
	var wg sync.WaitGroup
	per := (len(img.chunks) + readers - 1) / readers
	b.StartTimer()
	start := time.Now()
	for r := range readers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			buf := make([]byte, rafs.DefaultChunkSize)
			for _, k := range img.chunks[min(r*per, len(img.chunks)):min((r+1)*per, len(img.chunks))] {
				t0 := time.Now()
				if err := f.ReadChunk(ctx, k, buf[:k.Size]); err != nil {
					errs[r] = err
					return
				}
				lats[r] = append(lats[r], time.Since(t0))
			}
		}()
	}
	wg.Wait()
	d := time.Since(start)
	b.StopTimer()
	for _, err := range errs {
		if err != nil {
			b.Fatal(err)
		}
	}
	return d, slices.Concat(lats...)
}

// mountBackend puts the backend behind the Fetcher's interfaces as the
// mount daemon does, passing the decoded bytes the peer client verified.
type mountBackend struct{ b *backend.Backend }

var _ fusemount.DecodedChunkBackend = mountBackend{}

func (m mountBackend) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	src, err := m.b.ReadBlobFrom(ctx, blob, off, p)
	return string(src), err
}

func (m mountBackend) ReadDecodedChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored, plain []byte, src string) error) (string, error) {
	src, err := m.b.ReadDecodedChunksFrom(ctx, blob, chunks, func(i int, c rafs.Chunk, stored, plain []byte, src backend.Source) error {
		return deliver(i, c, stored, plain, string(src))
	})
	return string(src), err
}

// mountBackendNoDecoded reads runs without the decoded bytes: the Fetcher
// decodes and verifies every chunk itself.
type mountBackendNoDecoded struct{ b *backend.Backend }

var _ fusemount.ChunkBackend = mountBackendNoDecoded{}

func (m mountBackendNoDecoded) ReadBlobFrom(ctx context.Context, blob rafs.Blob, off int64, p []byte) (string, error) {
	return mountBackend(m).ReadBlobFrom(ctx, blob, off, p)
}

func (m mountBackendNoDecoded) ReadChunksFrom(ctx context.Context, blob rafs.Blob, chunks []rafs.Chunk,
	deliver func(i int, dc rafs.Chunk, stored []byte) error) (string, error) {
	src, err := m.b.ReadChunksFrom(ctx, blob, chunks, deliver)
	return string(src), err
}

// benchPeer is a peer as peer/daemon builds it: libp2p host, node cache,
// exchange server, Node (with the upstream client as its origin) and the
// proxy in front of it, on loopback.
type benchPeer struct {
	node     *Node
	url      string
	cacheDir string
	stop     func()
}

func startBenchPeer(b *testing.B, keyFile string, st *scheduler.State, originURL string) *benchPeer {
	b.Helper()
	dir := b.TempDir()
	var closers []func()
	stop := func() {
		for _, c := range slices.Backward(closers) {
			c()
		}
	}
	fail := func(err error) {
		stop()
		b.Fatal(err)
	}
	hc := dhost.Loopback(filepath.Join(dir, "identity.key"), keyFile)
	hc.DialTimeout = 5 * time.Second
	h, err := dhost.New(context.Background(), hc, nil)
	if err != nil {
		fail(err)
	}
	closers = append(closers, func() { h.Close() })
	p := &benchPeer{cacheDir: filepath.Join(dir, "cache")}
	c, err := cache.Open(cache.Default(p.cacheDir))
	if err != nil {
		fail(err)
	}
	closers = append(closers, func() { c.Close() })
	srv, err := exchange.NewServer(h, c, exchange.DefaultServerConfig(), nil)
	if err != nil {
		fail(err)
	}
	closers = append(closers, func() { srv.Close() })
	rc := registry.Default()
	rc.DefaultRegistry = originURL
	up, err := registry.New(rc, nil)
	if err != nil {
		fail(err)
	}
	closers = append(closers, func() { up.Close() })
	if p.node, err = NewNode(DefaultNode(), h, c, newRouter(b, st, h), up, nil); err != nil {
		fail(err)
	}
	runCtx, stopRun := context.WithCancel(context.Background())
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		_ = p.node.Run(runCtx)
	}()
	closers = append(closers, func() {
		stopRun()
		<-ran
		p.node.Close()
	})
	pc := proxy.Default()
	pc.Listen = "127.0.0.1:0"
	px, err := proxy.New(pc, p.node, up, nil, nil)
	if err != nil {
		fail(err)
	}
	if err := px.Listen(); err != nil {
		fail(err)
	}
	serveCtx, stopServe := context.WithCancel(context.Background())
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = px.Serve(serveCtx)
	}()
	closers = append(closers, func() {
		stopServe()
		<-served
	})
	p.url = px.URL()
	p.stop = sync.OnceFunc(stop)
	return p
}
