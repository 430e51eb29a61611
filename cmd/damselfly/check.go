package main

import (
	"encoding/json"
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/rafs"
)

func newCheck(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "check IMAGE|BOOTSTRAP",
		Short: "Fetch and verify every chunk of a RAFS image; exit non-zero if any is missing or corrupt",
		Args:  unlessPrintConfig(cobra.ExactArgs(1)),
	}
	f := cmd.Flags()
	f.Int("parallel", 4, "blobs checked at once")
	f.Bool("json", false, "print JSON")
	f.Bool("print-config", false, "print the effective settings (file, environment, flags) and exit")
	f.Bool("insecure", false, "plain HTTP to registries (automatic for loopback)")
	f.String("platform", "", "os/arch[/variant] to pick from a multi-platform image")
	f.String("blob-dir", "", "blob directory of a local bootstrap (default: its directory)")
	f.Int(maxBootstrapFlag, rafs.DefaultMaxBootstrapSize, maxBootstrapUsage)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := configs.New(g.configFile, "check")
		if err != nil {
			return err
		}
		if err := l.BindFlags(cmd.Flags()); err != nil {
			return err
		}
		if l.Bool("print-config") {
			return l.PrintSettings(cmd.OutOrStdout())
		}
		img, err := openImage(cmd, l, args[0])
		if err != nil {
			return err
		}
		defer img.Close()
		prog := newProgress("check", l.Bool("json"))
		res, err := img.Check(cmd.Context(), l.Int("parallel"), prog.Add)
		prog.Finish()
		if err != nil {
			return err
		}
		if l.Bool("json") {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			if err := enc.Encode(res); err != nil {
				return err
			}
		} else {
			for _, p := range res.Problems {
				if p.Chunk < 0 {
					fmt.Printf("BAD blob %s: %s\n", p.Blob, p.Error)
					continue
				}
				fmt.Printf("BAD chunk %d %s (blob %s at %d): %s\n", p.Chunk, p.Digest, p.Blob, p.Offset, p.Error)
				for _, path := range p.Paths {
					fmt.Printf("    used by %s\n", path)
				}
			}
			fmt.Printf("checked %d chunks in %d blobs (%s): %d problems\n", res.Chunks, res.Blobs, humanBytes(int64(res.Bytes)), len(res.Problems))
		}
		if len(res.Problems) > 0 {
			return errSilent
		}
		return nil
	}
	return cmd
}
