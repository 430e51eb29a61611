package main

import (
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/rafs"
	"damselfly/rafs/image"
)

func newInspect(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "inspect IMAGE|BOOTSTRAP",
		Short: "Summarise a RAFS image: files, bytes, chunks, dedup, blobs, compression, prefetch",
		Args:  unlessPrintConfig(cobra.ExactArgs(1)),
	}
	f := cmd.Flags()
	f.Bool("tree", false, "also list every path with its type, mode, owner and size")
	f.Bool("print-config", false, "print the effective settings (file, environment, flags) and exit")
	f.Bool("json", false, "print JSON")
	f.Bool("insecure", false, "plain HTTP to registries (automatic for loopback)")
	f.String("platform", "", "os/arch[/variant] to pick from a multi-platform image")
	f.String("blob-dir", "", "blob directory of a local bootstrap (default: its directory)")
	f.Int(maxBootstrapFlag, rafs.DefaultMaxBootstrapSize, maxBootstrapUsage)
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := configs.New(g.configFile, "inspect")
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
		b := img.Bootstrap()
		s, err := rafs.Summarize(b)
		if err != nil {
			return err
		}
		if l.Bool("json") {
			out := struct {
				Image   string       `json:"image"`
				Digest  string       `json:"digest,omitempty"`
				Summary rafs.Summary `json:"summary"`
				Blobs   []string     `json:"blobs"`
			}{Image: args[0], Summary: s}
			if img.Manifest != nil {
				out.Digest = img.Digest.String()
			}
			blobs, _ := b.Blobs()
			for _, bl := range blobs {
				out.Blobs = append(out.Blobs, bl.Digest.String())
			}
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(out)
		}
		fmt.Printf("image        %s\n", args[0])
		if img.Manifest != nil {
			fmt.Printf("manifest     %s\n", img.Digest)
		}
		fmt.Printf("files        %d regular, %d dirs, %d symlinks, %d other, %d extra hardlinks\n", s.Files, s.Dirs, s.Symlinks, s.Others, s.Hardlinks)
		fmt.Printf("bytes        %s (%d)\n", humanBytes(int64(s.Bytes)), s.Bytes)
		fmt.Printf("chunks       %d referenced, %d unique of %s (%s, %s digests)\n", s.ChunkRefs, s.UniqueChunks, humanBytes(int64(s.ChunkSize)), s.Compressor, s.Digest)
		fmt.Printf("dedup        %.3fx (content %s, unique %s)\n", s.DedupRatio, humanBytes(int64(s.Bytes)), humanBytes(int64(s.UniqueBytes)))
		fmt.Printf("compression  %.3f (stored %s)\n", s.CompressRatio, humanBytes(int64(s.StoredBytes)))
		fmt.Printf("blobs        %d, %s\n", s.Blobs, humanBytes(int64(s.BlobBytes)))
		fmt.Printf("prefetch     %d files\n", s.Prefetch)
		fmt.Printf("bootstrap    %s\n", humanBytes(int64(s.BootstrapBytes)))
		if l.Bool("tree") {
			return printTree(img.FS(cmd.Context()))
		}
		return nil
	}
	return cmd
}

func printTree(fsys *rafs.FS) error {
	return fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		in := info.Sys().(rafs.Inode)
		extra := ""
		if in.IsSymlink() {
			t, _ := fsys.ReadLink(p)
			extra = " -> " + t
		}
		if in.Mode&rafs.ModeType == rafs.ModeChr || in.Mode&rafs.ModeType == rafs.ModeBlk {
			extra = fmt.Sprintf(" dev %d:%d", in.RdevMajor, in.RdevMinor)
		}
		fmt.Printf("%s %5d:%-5d %12d %s%s\n", info.Mode(), in.UID, in.GID, in.Size, path.Join("/", p), extra)
		return nil
	})
}

// The flag that bounds the bootstrap an image's bootstrap layer may
// inflate to (the mount and peer configurations' max_bootstrap_bytes).
const (
	maxBootstrapFlag  = "max-bootstrap-bytes"
	maxBootstrapUsage = "largest bootstrap an image's bootstrap layer may inflate to; a layer declaring more is refused"
)

// openImage opens a RAFS image (any transport) or a local bootstrap.
func openImage(cmd *cobra.Command, l *configs.Loader, ref string) (*image.Image, error) {
	topts, err := transportOptions(l)
	if err != nil {
		return nil, err
	}
	return image.Open(cmd.Context(), ref, image.Options{Transport: topts, BlobDir: l.String("blob-dir"), MaxBootstrapSize: int64(l.Int(maxBootstrapFlag))})
}
