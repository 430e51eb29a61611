package main

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/v1/layout"

	"damselfly/integration/bench"
	"damselfly/integration/harness"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
)

// Image profiles (-image).
const (
	profileDebian = "debian" // bench.DebianImages v1: Python, NumPy, SciPy from the Debian archive
	profileSample = "sample" // rafs/sample at -sample-mb
)

// benchImage is the image every node reads, converted into the origin's
// storage, and what each workload reads of it.
type benchImage struct {
	Profile string          `json:"profile"`
	Name    string          `json:"name"`
	Source  string          `json:"source"`
	Repo    string          `json:"repo"` // "bench/NAME", tag rafs
	Convert *convert.Result `json:"convert"`
	// Files and FileBytes are the image's regular files and their
	// content; Startup the startup subset, StartupFrom how it was found.
	Files        int      `json:"files"`
	FileBytes    int64    `json:"file_bytes"`
	Startup      []string `json:"startup"`
	StartupBytes int64    `json:"startup_bytes"`
	StartupFrom  string   `json:"startup_from"`
	// Need is, per workload, what a node must receive to finish it once
	// its mount is up: the stored bytes of the distinct chunks of the
	// files it reads (chunkBytes). The link floor divides it by the rate.
	// The bootstrap layer (Convert.BootstrapLayer) comes before, while
	// the mount starts.
	Need map[string]int64 `json:"need_bytes"`
	// PlainBytes is the plain image (gzip layers, config, manifest) that
	// the pull mode copies, tag plain in Repo; zero without that mode.
	PlainBytes int64 `json:"plain_bytes,omitempty"`

	all []string // every regular file, in lexical walk order
}

// prepareImage builds (or reuses) the profile's OCI layout, converts it
// into registry storage at regDir through a loopback registry that is
// stopped again before it returns, and works out the file lists and the
// bytes each workload needs.
func (b *rig) prepareImage(ctx context.Context, regDir string) (*benchImage, error) {
	bi := &benchImage{Profile: b.o.profile, Need: map[string]int64{}}
	var layout, tag string
	scale := float64(int(bench.ScaleFor(b.o.sampleBytes)*100+0.5)) / 100
	switch b.o.profile {
	case profileDebian:
		b.logf("preparing the Debian image (the first run downloads packages into %s)", filepath.Join(b.o.out, "debian"))
		dir, err := bench.DebianLayout(ctx, b.o.out, logWriter{b})
		if err != nil {
			return nil, err
		}
		layout, tag, bi.Name = dir, bench.DebianImages[0].Tag, "debian"
	case profileSample:
		bi.Name = fmt.Sprintf("sample-%dm", b.o.sampleBytes>>20)
		dir, err := bench.SampleLayout(ctx, filepath.Join(b.o.out, "deployed", "images"), bi.Name, scale, logWriter{b})
		if err != nil {
			return nil, err
		}
		layout, tag = dir, "sample"
	default:
		return nil, fmt.Errorf("image profile %q: want %s or %s", b.o.profile, profileDebian, profileSample)
	}
	bi.Source = "oci:" + layout + ":" + tag
	if rel, err := filepath.Rel(b.root, layout); err == nil && !strings.HasPrefix(rel, "..") {
		bi.Source = "oci:" + rel + ":" + tag // the report's, readable on another checkout
	}
	bi.Repo = "bench/" + bi.Name

	reg, err := harness.StartRegistry(ctx, harness.RegistryConfig{Dir: regDir, LogDir: b.logs, OwnGroup: true})
	if err != nil {
		return nil, err
	}
	defer func() {
		if serr := reg.Stop(); serr != nil {
			b.logf("loopback registry: %v", serr)
		}
	}()
	start := time.Now()
	cctx, cancel := context.WithTimeout(ctx, stepTimeout)
	bi.Convert, err = harness.Convert(cctx, b.bin, "oci:"+layout+":"+tag, "docker://"+reg.Host()+"/"+bi.Repo+":rafs", b.o.convFlags...)
	cancel()
	if err != nil {
		return nil, err
	}
	b.logf("%s: converted in %.1fs: %d files, %s of blobs, %s bootstrap layer", bi.Name, time.Since(start).Seconds(),
		bi.Convert.Stats.Files, mib(bi.Convert.NewBlobBytes), mib(bi.Convert.BootstrapLayer))
	if slices.Contains(b.o.modes, modePull) {
		if bi.PlainBytes, err = pushPlain(ctx, layout, tag, "docker://"+reg.Host()+"/"+bi.Repo+":"+plainTag); err != nil {
			return nil, err
		}
		b.logf("%s: plain image pushed, %s", bi.Name, mib(bi.PlainBytes))
	}

	img, err := image.Open(ctx, "docker://"+reg.Host()+"/"+bi.Repo+":rafs", image.Options{})
	if err != nil {
		return nil, err
	}
	defer img.Close()
	err = fs.WalkDir(img.FS(ctx), ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || !d.Type().IsRegular() {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		bi.all = append(bi.all, p)
		bi.FileBytes += fi.Size()
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", bi.Name, err)
	}
	bi.Files = len(bi.all)

	switch b.o.profile {
	case profileDebian:
		if bi.Startup, err = b.pythonStartup(ctx, reg.Host(), bi, img); err != nil {
			return nil, err
		}
		bi.StartupFrom = fmt.Sprintf("`python3 -c %q` chrooted in the mount; the files it opens (strace, once, on a mount of the image) give the floor", bench.PythonImport)
	case profileSample:
		bi.Startup = bench.SampleStartupSet(scale)
		bi.StartupFrom = "sample.StartupSet (entry points and configuration, about 5% of the files), read in order by one reader"
	}
	boot := img.Bootstrap()
	for _, p := range bi.Startup {
		in, err := boot.LookupPath(p)
		if err != nil {
			return nil, fmt.Errorf("startup file %s: %w", p, err)
		}
		bi.StartupBytes += int64(in.Size)
	}
	for w, paths := range map[string][]string{workloadAll: bi.all, workloadStartup: bi.Startup} {
		n, err := chunkBytes(boot, paths)
		if err != nil {
			return nil, fmt.Errorf("%s %s: %w", bi.Name, w, err)
		}
		bi.Need[w] = n
	}
	b.logf("%s: %d files (%s); startup subset %d files (%s); chunks to read every file %s, the startup subset's %s",
		bi.Name, bi.Files, mib(bi.FileBytes), len(bi.Startup), mib(bi.StartupBytes), mib(bi.Need[workloadAll]), mib(bi.Need[workloadStartup]))
	return bi, nil
}

// plainTag is the tag of the plain image in the origin.
const plainTag = "plain"

// pushPlain copies the image tagged tag in the OCI layout at dir to dst
// with skopeo, as it is (gzip layers), and returns its size.
func pushPlain(ctx context.Context, dir, tag, dst string) (int64, error) {
	p, err := layout.FromPath(dir)
	if err != nil {
		return 0, err
	}
	img, err := bench.LayoutImage(p, tag)
	if err != nil {
		return 0, err
	}
	size, err := bench.ImageBytes(img)
	if err != nil {
		return 0, err
	}
	cctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	out, err := exec.CommandContext(cctx, "skopeo", "copy", "--quiet", "--insecure-policy", "--dest-tls-verify=false",
		"oci:"+dir+":"+tag, dst).CombinedOutput()
	if err != nil {
		return 0, fmt.Errorf("skopeo copy to %s: %w: %s", dst, err, out)
	}
	return size, nil
}

// pythonStartup mounts the image from the loopback registry in the
// harness's own namespace, runs the Python import under strace
// chrooted in the mount, and returns the files it opened.
func (b *rig) pythonStartup(ctx context.Context, regHost string, bi *benchImage, img *image.Image) ([]string, error) {
	dir := filepath.Join(b.work, "strace")
	mnt := filepath.Join(dir, "mnt")
	if err := os.MkdirAll(mnt, 0o755); err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	cfg := filepath.Join(dir, "mount.yaml")
	yml := fmt.Sprintf("backend:\n  type: registry\n  proxy:\n    url: \"\"\ncache:\n  dir: %s\n", filepath.Join(dir, "cache"))
	if err := os.WriteFile(cfg, []byte(yml), 0o600); err != nil {
		return nil, err
	}
	p, err := harness.Start(harness.ProcConfig{Name: "strace-mount", LogDir: b.logs, Path: b.bin, OwnGroup: true,
		Args: []string{"--config", cfg, "mount", "docker://" + regHost + "/" + bi.Repo + ":rafs", mnt}})
	if err != nil {
		return nil, err
	}
	if err := harness.WaitMounted(ctx, p, mnt, time.Minute); err != nil {
		p.Stop()
		return nil, err
	}
	sctx, cancel := context.WithTimeout(ctx, stepTimeout)
	files, err := bench.PythonStartupSet(sctx, mnt, img)
	cancel()
	return files, errors.Join(err, harness.Unmount(p, mnt))
}

// mib formats bytes in MiB.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// logWriter passes the image builders' progress through logf.
type logWriter struct{ b *rig }

func (w logWriter) Write(p []byte) (int, error) {
	w.b.logf("%s", strings.TrimRight(string(p), "\n"))
	return len(p), nil
}
