// Command images builds the benchmark images without measuring anything:
// the Debian Python/NumPy/SciPy pair (tags v1 and v2, from the Debian
// archive with apt-get download and dpkg-deb -x) and, with -sample-bytes,
// a synthetic sample image, as gzip OCI layouts under OUT. It prints the
// references to convert.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"damselfly/integration/bench"
)

func main() {
	out := flag.String("out", "integration/bench/out", "cache directory")
	sampleBytes := flag.Int64("sample-bytes", 0, "also write a synthetic sample image of about this much content")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	dir, err := bench.DebianLayout(ctx, *out, os.Stderr)
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, img := range bench.DebianImages {
		fmt.Printf("oci:%s:%s\n", dir, img.Tag)
	}
	if *sampleBytes > 0 {
		dir, err := bench.SampleLayout(ctx, *out, fmt.Sprintf("sample-%d", *sampleBytes), bench.ScaleFor(*sampleBytes), os.Stderr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "images:", err)
			os.Exit(1)
		}
		fmt.Printf("oci:%s:sample\n", dir)
	}
}
