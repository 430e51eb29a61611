// Command estargz is the eStargz baseline of the converter benchmarks: it
// converts a gzip OCI image to eStargz with estargz.Build's default
// options, so the harness can measure it as a child process exactly as it
// measures `damselfly convert`.
//
//	estargz oci:SRC[:TAG] DSTDIR
//
// It prints a JSON summary on stdout.
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"damselfly/integration/bench"
)

func main() {
	if len(os.Args) != 3 {
		fmt.Fprintln(os.Stderr, "usage: estargz oci:SRC[:TAG] DSTDIR")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	res, err := bench.ConvertEStargz(ctx, os.Args[1], os.Args[2])
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "estargz:", err)
		os.Exit(1)
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(res); err != nil {
		fmt.Fprintln(os.Stderr, "estargz:", err)
		os.Exit(1)
	}
}
