package main

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/transport"
)

func newConvert(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "convert SRC DST",
		Short: "Convert an OCI image to a RAFS image (bootstrap + chunk blobs)",
		Long: `Convert reads SRC (oci:PATH[:TAG], docker-archive:PATH, docker://HOST/REPO:TAG)
and writes a RAFS image to DST: one blob of compressed chunks per source layer
and one bootstrap layer with the merged metadata of the whole image.`,
		Args: unlessPrintConfig(cobra.ExactArgs(2)),
	}
	f := cmd.Flags()
	f.Int("chunk-size", rafs.DefaultChunkSize, "chunk size in bytes: a power of two from 64 KiB to 16 MiB")
	f.String("compressor", "zstd", "chunk compressor: zstd or none")
	f.Int("level", 1, "zstd level, 1 (fastest) to 4 (smallest)")
	f.String("digest", rafs.DefaultDigest.String(), "chunk digest algorithm: blake3, blake3-stored (BLAKE3 of the stored bytes: peers verify without decoding, but chunk identity depends on --level) or sha256 (a --chunk-dict image must use the same)")
	f.Int("workers", 0, "goroutines hashing and compressing chunks (0: one per core)")
	f.Int("batch-size", 0, "pack files smaller than a quarter of this into shared chunks of up to this size (0: default 512 KiB, -1: off)")
	f.String("chunk-dict", "", "RAFS image (or local bootstrap) whose chunks are reused instead of stored again")
	f.Int(maxBootstrapFlag, rafs.DefaultMaxBootstrapSize, maxBootstrapUsage)
	f.String("prefetch-patterns", "", "file of paths or globs (one per line) for the prefetch table")
	f.String("platform", "", "os/arch[/variant] to pick from a multi-platform source")
	f.Bool("insecure", false, "plain HTTP to registries (automatic for loopback)")
	f.Bool("index", false, "also write an image index holding the original and the RAFS manifest")
	f.String("work-dir", "", "directory for temporary blobs (default: system temp)")
	f.Bool("print-config", false, "print the effective settings (file, environment, flags) and exit")
	f.Bool("json", false, "print a JSON summary on stdout")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := configs.New(g.configFile, "convert")
		if err != nil {
			return err
		}
		if err := l.BindFlags(cmd.Flags()); err != nil {
			return err
		}
		if l.Bool("print-config") {
			return l.PrintSettings(cmd.OutOrStdout())
		}
		log, err := g.logger()
		if err != nil {
			return err
		}
		comp, err := rafs.ParseCompressor(l.String("compressor"))
		if err != nil {
			return err
		}
		digest, err := rafs.ParseDigestAlgo(l.String("digest"))
		if err != nil {
			return fmt.Errorf("--digest: %w", err)
		}
		topts, err := transportOptions(l)
		if err != nil {
			return err
		}
		var prefetch []string
		if p := l.String("prefetch-patterns"); p != "" {
			data, err := os.ReadFile(p)
			if err != nil {
				return fmt.Errorf("--prefetch-patterns: %w", err)
			}
			prefetch = strings.Split(string(data), "\n")
		}
		asJSON := l.Bool("json")
		prog := newProgress("convert", asJSON)
		defer prog.Finish()
		res, err := convert.Convert(cmd.Context(), args[0], args[1], convert.Options{
			Build: rafs.BuildOptions{
				ChunkSize: uint32(l.Int("chunk-size")), Uncompressed: comp == rafs.CompressNone, Level: l.Int("level"), Digest: digest,
				Workers: l.Int("workers"), BatchSize: l.Int("batch-size"), Prefetch: prefetch, Progress: prog.Add,
			},
			ChunkDict:        l.String("chunk-dict"),
			MaxBootstrapSize: int64(l.Int(maxBootstrapFlag)),
			Index:            l.Bool("index"),
			Transport:        topts,
			WorkDir:          l.String("work-dir"),
			Logger:           log,
		})
		prog.Finish()
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(res)
		}
		printConvert(res)
		return nil
	}
	return cmd
}

func printConvert(r *convert.Result) {
	s := r.Stats
	mbps := 0.0
	if r.Seconds > 0 {
		mbps = float64(s.ContentBytes) / 1e6 / r.Seconds
	}
	fmt.Printf("converted %s -> %s in %.1fs (%.0f MB/s of content)\n", r.Source, r.Destination, r.Seconds, mbps)
	fmt.Printf("  manifest   %s\n", r.Digest)
	if r.IndexDigest != "" {
		fmt.Printf("  index      %s\n", r.IndexDigest)
	}
	fmt.Printf("  tree       %d files, %d dirs, %d other, %d hardlinks\n", s.Files, s.Dirs, s.Others, s.Hardlinks)
	fmt.Printf("  content    %s in %d chunks, %d new, %d from dictionary\n", humanBytes(int64(s.ContentBytes)), s.Pieces, s.NewChunks, s.DictChunks)
	fmt.Printf("  stored     %s new blobs (source layers %s), bootstrap %s (%s compressed)\n",
		humanBytes(r.NewBlobBytes), humanBytes(r.SourceLayers), humanBytes(r.BootstrapBytes), humanBytes(r.BootstrapLayer))
	if s.PrefetchChunks > 0 {
		fmt.Printf("  prefetch   %d of the new chunks in the prefetch blob\n", s.PrefetchChunks)
	}
}

// transportOptions reads the registry settings shared by every command.
func transportOptions(l *configs.Loader) (transport.Options, error) {
	o := transport.Options{Insecure: l.Bool("insecure"), UserAgent: "damselfly/" + version}
	if p := l.String("platform"); p != "" {
		pl, err := v1.ParsePlatform(p)
		if err != nil {
			return o, fmt.Errorf("--platform: %w", err)
		}
		o.Platform = pl
	}
	return o, nil
}
