package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/integration/sample"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	"damselfly/rafs/transport"
)

func newDemo(g *globals) *cobra.Command {
	cmd := &cobra.Command{
		Use:   "demo",
		Short: "Build a sample image, convert it to RAFS, read it lazily, unpack it and verify every byte",
		Args:  cobra.NoArgs,
	}
	f := cmd.Flags()
	f.String("dir", "", "work directory (default: a new temporary one, removed at the end)")
	f.Float64("scale", 1, "sample image size factor (1 is about 60 MB)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		l, err := configs.New(g.configFile, "demo")
		if err != nil {
			return err
		}
		if err := l.BindFlags(cmd.Flags()); err != nil {
			return err
		}
		scale, _ := cmd.Flags().GetFloat64("scale")
		return runDemo(cmd.Context(), l.String("dir"), scale)
	}
	return cmd
}

// countingBlobs counts stored bytes fetched, to show what lazy reads cost.
type countingBlobs struct {
	rafs.BlobReader
	n atomic.Int64
}

func (c *countingBlobs) ReadBlob(ctx context.Context, b rafs.Blob, off int64, p []byte) error {
	c.n.Add(int64(len(p)))
	return c.BlobReader.ReadBlob(ctx, b, off, p)
}

func runDemo(ctx context.Context, dir string, scale float64) error {
	if dir == "" {
		d, err := os.MkdirTemp("", "damselfly-demo-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	step := func(format string, a ...any) { fmt.Printf("==> "+format+"\n", a...) }

	step("generating a sample image (Debian-like base, Python packages, an app with a model)")
	t0 := time.Now()
	smp := sample.Image("sample", sample.Options{Seed: 1, Scale: scale})
	layout := filepath.Join(dir, "oci")
	if err := rafstest.WriteOCILayout(ctx, layout, smp); err != nil {
		return err
	}
	srcBytes, err := dirSize(filepath.Join(layout, "blobs"))
	if err != nil {
		return err
	}
	fmt.Printf("    %s of gzip layers in %s\n", humanBytes(srcBytes), time.Since(t0).Round(time.Millisecond))

	step("converting oci:%s:sample to RAFS", layout)
	startup := sample.StartupSet(smp)
	prefetch := filepath.Join(dir, "prefetch.txt")
	if err := os.WriteFile(prefetch, []byte(joinLines(startup)), 0o644); err != nil {
		return err
	}
	res, err := convert.Convert(ctx, "oci:"+layout+":sample", "oci:"+layout+":sample-rafs", convert.Options{
		Build: rafs.BuildOptions{Prefetch: startup},
	})
	if err != nil {
		return err
	}
	printConvert(res)

	step("opening the RAFS image: only the bootstrap is fetched")
	t1 := time.Now()
	img, err := image.Open(ctx, "oci:"+layout+":sample-rafs", image.Options{Transport: transport.Options{}})
	if err != nil {
		return err
	}
	defer img.Close()
	ready := time.Since(t1)
	s, err := rafs.Summarize(img.Bootstrap())
	if err != nil {
		return err
	}
	fmt.Printf("    ready in %s: %d files, %s of content, bootstrap %s\n", ready.Round(time.Microsecond), s.Files, humanBytes(int64(s.Bytes)), humanBytes(int64(s.BootstrapBytes)))

	step("reading the %d startup files lazily", len(startup))
	cb := &countingBlobs{BlobReader: img.Blobs()}
	fsys := rafs.NewFS(ctx, img.Bootstrap(), &rafs.BlobChunkSource{Bootstrap: img.Bootstrap(), Blobs: cb})
	var read int64
	t2 := time.Now()
	for _, p := range startup {
		data, err := fs.ReadFile(fsys, p)
		if err != nil {
			return err
		}
		read += int64(len(data))
	}
	fmt.Printf("    read %s in %s, fetching %s of %s stored (%.1f%%)\n", humanBytes(read), time.Since(t2).Round(time.Millisecond),
		humanBytes(cb.n.Load()), humanBytes(int64(s.BlobBytes)), 100*float64(cb.n.Load())/float64(max(1, s.BlobBytes)))

	step("checking every chunk against its digest")
	cr, err := img.Check(ctx, 4, nil)
	if err != nil {
		return err
	}
	if len(cr.Problems) > 0 {
		return fmt.Errorf("check found %d problems, first: %s", len(cr.Problems), cr.Problems[0].Error)
	}
	fmt.Printf("    %d chunks in %d blobs verified\n", cr.Chunks, cr.Blobs)

	step("unpacking the whole image and comparing it with the source")
	rootfs := filepath.Join(dir, "rootfs")
	t3 := time.Now()
	if err := rafs.Unpack(ctx, img.Bootstrap(), img.ChunkSource(), rootfs, rafs.UnpackOptions{}); err != nil {
		return err
	}
	fmt.Printf("    unpacked in %s\n", time.Since(t3).Round(time.Millisecond))
	n, err := compareWithSource(smp, rootfs)
	if err != nil {
		return err
	}
	fmt.Printf("    %d files identical to the source layers\n", n)
	fmt.Println("demo: OK")
	return nil
}

// compareWithSource applies the sample's layers by name (it has one
// whiteout and no other layer tricks) and compares every regular file.
func compareWithSource(img rafstest.Image, rootfs string) (int, error) {
	want := map[string][]byte{}
	for _, l := range img.Layers {
		for _, e := range l {
			name := e.Hdr.Name
			if i := bytes.LastIndex([]byte(name), []byte("/.wh.")); i >= 0 {
				delete(want, name[:i+1]+name[i+5:])
				continue
			}
			if e.Data == nil {
				continue
			}
			var b bytes.Buffer
			if err := e.Data(&b); err != nil {
				return 0, err
			}
			want[name] = b.Bytes()
		}
	}
	for name, data := range want {
		got, err := os.ReadFile(filepath.Join(rootfs, name))
		if err != nil {
			return 0, err
		}
		if !bytes.Equal(got, data) {
			return 0, fmt.Errorf("%s differs from the source", name)
		}
	}
	return len(want), nil
}

func dirSize(dir string) (int64, error) {
	var n int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.Type().IsRegular() {
			info, err := d.Info()
			if err != nil {
				return err
			}
			n += info.Size()
		}
		return nil
	})
	return n, err
}

func joinLines(s []string) string {
	var b bytes.Buffer
	for _, l := range s {
		b.WriteString("/" + l + "\n")
	}
	return b.String()
}
