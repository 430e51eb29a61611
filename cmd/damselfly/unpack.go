package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/rafs"
)

func newUnpack(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "unpack IMAGE|BOOTSTRAP DEST",
		Short: "Export the whole merged root filesystem to a directory or a .tar file",
		Long: `Unpack writes every file of a RAFS image, verified chunk by chunk, into DEST:
a new or empty directory, or a file ending in .tar. Nothing is written outside
DEST, whatever the image holds; on failure DEST is removed again.`,
		Args: unlessPrintConfig(cobra.ExactArgs(2)),
	}
	f := cmd.Flags()
	f.Int("workers", 8, "files written at once")
	f.Bool("print-config", false, "print the effective settings (file, environment, flags) and exit")
	f.Bool("insecure", false, "plain HTTP to registries (automatic for loopback)")
	f.String("platform", "", "os/arch[/variant] to pick from a multi-platform image")
	f.String("blob-dir", "", "blob directory of a local bootstrap (default: its directory)")
	f.Int(maxBootstrapFlag, rafs.DefaultMaxBootstrapSize, maxBootstrapUsage)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := configs.New(g.configFile, "unpack")
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
		img, err := openImage(cmd, l, args[0])
		if err != nil {
			return err
		}
		defer img.Close()
		s, err := rafs.Summarize(img.Bootstrap())
		if err != nil {
			return err
		}
		prog := newProgress("unpack", false)
		prog.SetTotal(int64(s.Bytes))
		defer prog.Finish()
		opts := rafs.UnpackOptions{Workers: l.Int("workers"), Logger: log, Progress: prog.Add}
		dest := args[1]
		if strings.HasSuffix(dest, ".tar") {
			err = unpackTar(cmd, img.Bootstrap(), img.ChunkSource(), dest, opts)
		} else {
			err = rafs.Unpack(cmd.Context(), img.Bootstrap(), img.ChunkSource(), dest, opts)
		}
		prog.Finish()
		if err != nil {
			return err
		}
		fmt.Fprintf(os.Stderr, "unpacked %d files (%s) to %s\n", s.Files, humanBytes(int64(s.Bytes)), dest)
		return nil
	}
	return cmd
}

// unpackTar writes to a temporary file beside dest and renames it into
// place only when complete, so a failure leaves nothing half-written.
func unpackTar(cmd *cobra.Command, b *rafs.Bootstrap, src rafs.ChunkSource, dest string, opts rafs.UnpackOptions) error {
	tmp, err := os.CreateTemp(filepath.Dir(dest), "."+filepath.Base(dest)+".*")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if err := rafs.UnpackTar(cmd.Context(), b, src, tmp, opts); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), dest)
}
