package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"damselfly/integration/bench"
	"damselfly/integration/harness"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// benchImage is one image in the registry.
type benchImage struct {
	Name    string          `json:"name"` // debian, sample, files-200000
	Kind    string          `json:"kind"` // debian, sample, files
	Source  string          `json:"source"`
	Repo    string          `json:"repo"`
	Convert *convert.Result `json:"convert"`
	// ConvertStartup is the conversion with the startup set as prefetch
	// patterns (tag rafs-startup), for the startup rows.
	ConvertStartup *convert.Result `json:"convert_startup,omitempty"`
	Files          int             `json:"files"`
	Bytes          int64           `json:"file_bytes"`
	// Startup is the startup-like read set (debian, sample).
	Startup      []string `json:"startup,omitempty"`
	StartupBytes int64    `json:"startup_bytes,omitempty"`
	StartupFrom  string   `json:"startup_from,omitempty"`

	layout, tag string
	list        *fileList
	native      string // umoci-unpacked rootfs, for the local-disk read
}

// plain reports whether the image is also pushed as its plain OCI
// self, for the pull-and-unpack baseline.
func (bi *benchImage) plain() bool { return bi.Kind != "files" }

// rig holds what every measurement shares.
type rig struct {
	o                    options
	root, out, work, bin string
	reg                  *registry
	images               []*benchImage
	env                  map[string]string
}

func (h *rig) logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "bench-mount: "+format+"\n", args...)
}

// rel shortens a path under the repository root for the report.
func (h *rig) rel(p string) string {
	if r, err := filepath.Rel(h.root, p); err == nil && !strings.HasPrefix(r, "..") {
		return r
	}
	return p
}

// newHarness checks the tools, builds damselfly, prepares the images
// and pushes them to a fresh registry.
func newHarness(ctx context.Context, root string, o options) (_ *rig, err error) {
	if os.Geteuid() != 0 {
		return nil, errors.New("run as root: FUSE mounts, chroot and drop_caches need it")
	}
	for _, tool := range []string{"skopeo", "umoci", "docker-registry", "fusermount3", "chroot", "find"} {
		if _, err := exec.LookPath(tool); err != nil {
			return nil, fmt.Errorf("%s is required (make deps installs the Debian packages): %w", tool, err)
		}
	}
	if _, err := os.Stat("/dev/fuse"); err != nil {
		return nil, fmt.Errorf("/dev/fuse is required: %w", err)
	}
	h := &rig{o: o, root: root, out: o.out, env: map[string]string{}}
	cache := filepath.Join(o.out, "mount")
	h.work = filepath.Join(cache, "work")
	defer func() {
		if err != nil {
			h.close()
		}
	}()
	if err := os.RemoveAll(h.work); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(h.work, 0o755); err != nil {
		return nil, err
	}
	h.bin = filepath.Join(cache, "bin", "damselfly")
	h.logf("building %s", h.rel(h.bin))
	if err := harness.Build(ctx, root, h.bin, "./cmd/damselfly"); err != nil {
		return nil, err
	}
	h.describe(ctx)

	if h.reg, err = startRegistry(ctx, filepath.Join(h.work, "registry")); err != nil {
		return nil, err
	}
	h.logf("docker-registry on %s", h.reg.host)
	if err := h.addImages(ctx, cache); err != nil {
		return nil, err
	}
	return h, nil
}

// addImages builds (or reuses) the source layouts, pushes them and
// prepares file lists, unpacked trees and startup sets.
func (h *rig) addImages(ctx context.Context, cache string) error {
	o := h.o
	if o.images["debian"] {
		h.logf("preparing the Debian image (the first run downloads packages into %s)", h.rel(filepath.Join(o.out, "debian")))
		dir, err := bench.DebianLayout(ctx, o.out, logWriter{h})
		if err != nil {
			return err
		}
		h.images = append(h.images, &benchImage{Name: "debian", Kind: "debian", layout: dir, tag: "v1"})
	}
	sampleScale := float64(int(bench.ScaleFor(o.sampleBytes)*100+0.5)) / 100
	if o.images["sample"] {
		name := fmt.Sprintf("sample-%dm", o.sampleBytes>>20)
		dir, err := bench.SampleLayout(ctx, filepath.Join(cache, "images"), name, sampleScale, logWriter{h})
		if err != nil {
			return err
		}
		h.images = append(h.images, &benchImage{Name: name, Kind: "sample", layout: dir, tag: "sample"})
	}
	if o.images["files"] && (o.rows["rss"] || o.rows["ready"]) {
		for _, n := range o.fileCounts {
			dir, err := filesLayout(ctx, filepath.Join(cache, "images"), n, h.logf)
			if err != nil {
				return err
			}
			h.images = append(h.images, &benchImage{Name: fmt.Sprintf("files-%d", n), Kind: "files", layout: dir, tag: "files"})
		}
	}
	if len(h.images) == 0 {
		return errors.New("no image selected")
	}
	for _, bi := range h.images {
		if err := h.push(ctx, bi); err != nil {
			return fmt.Errorf("%s: %w", bi.Name, err)
		}
		if bi.Kind == "files" {
			continue
		}
		if err := h.prepare(ctx, bi, sampleScale); err != nil {
			return fmt.Errorf("%s: %w", bi.Name, err)
		}
	}
	return nil
}

// push converts the image into the registry and, for a baseline, copies
// it there as it is.
func (h *rig) push(ctx context.Context, bi *benchImage) error {
	bi.Source = "oci:" + h.rel(bi.layout) + ":" + bi.tag
	bi.Repo = "bench/" + bi.Name
	src := "oci:" + bi.layout + ":" + bi.tag
	start := time.Now()
	var err error
	if bi.Convert, err = h.convert(ctx, src, "docker://"+h.reg.host+"/"+bi.Repo+":rafs"); err != nil {
		return err
	}
	h.logf("%s: converted into the registry in %.1fs (%d files, %s blobs, %s bootstrap layer)", bi.Name, time.Since(start).Seconds(),
		bi.Convert.Stats.Files, mib(bi.Convert.NewBlobBytes), mib(bi.Convert.BootstrapLayer))
	if bi.plain() {
		if _, err := runCmd(ctx, "skopeo", "copy", "--quiet", "--dest-tls-verify=false", src,
			"docker://"+h.reg.host+"/"+bi.Repo+":plain"); err != nil {
			return err
		}
	}
	return nil
}

// prepare lists the files, unpacks the image to local disk (the tree the
// warm read is compared with) and determines the startup set.
func (h *rig) prepare(ctx context.Context, bi *benchImage, sampleScale float64) error {
	img, err := image.Open(ctx, "docker://"+h.reg.host+"/"+bi.Repo+":rafs", image.Options{})
	if err != nil {
		return err
	}
	defer img.Close()
	if bi.list, err = listImage(ctx, img); err != nil {
		return err
	}
	bi.Files, bi.Bytes = len(bi.list.Paths), bi.list.Bytes
	bundle := filepath.Join(h.work, "native", bi.Name)
	h.logf("%s: unpacking %d files (%s) to local disk with umoci", bi.Name, bi.Files, mib(bi.Bytes))
	if bi.native, err = rafstest.UmociUnpack(ctx, bi.layout, bi.tag, bundle); err != nil {
		return err
	}
	switch bi.Kind {
	case "debian":
		if _, err := exec.LookPath("strace"); err != nil {
			return errors.New("strace is required to find the files python3 opens (apt-get install strace)")
		}
		if err := bench.RunPython(ctx, bi.native); err != nil {
			return err
		}
		if bi.Startup, err = bench.PythonStartupSet(ctx, bi.native, img); err != nil {
			return err
		}
		bi.StartupFrom = fmt.Sprintf("the regular files `python3 -c %q` opens (strace, chrooted in the unpacked image)", bench.PythonImport)
	case "sample":
		bi.Startup = bench.SampleStartupSet(sampleScale)
		bi.StartupFrom = "sample.StartupSet: entry points and configuration, about 5% of the files"
	}
	size := map[string]int64{}
	for i, p := range bi.list.Paths {
		size[p] = bi.list.Sizes[i]
	}
	for _, p := range bi.Startup {
		s, ok := size[p]
		if !ok {
			return fmt.Errorf("startup file %s is not a regular file of the image", p)
		}
		bi.StartupBytes += s
	}
	h.logf("%s: startup set of %d files (%s): %s", bi.Name, len(bi.Startup), mib(bi.StartupBytes), bi.StartupFrom)
	if !h.o.rows["startup"] {
		return nil
	}
	// The same image converted the way a user tunes it for start-up: the
	// recorded startup set as prefetch patterns, so its files are
	// prefetched first from a blob that holds only them.
	patterns := filepath.Join(h.work, bi.Name+"-startup.txt")
	var list strings.Builder
	for _, p := range bi.Startup {
		list.WriteString("/" + strings.TrimPrefix(p, "/") + "\n")
	}
	if err := os.WriteFile(patterns, []byte(list.String()), 0o644); err != nil {
		return err
	}
	start := time.Now()
	if bi.ConvertStartup, err = h.convert(ctx, "oci:"+bi.layout+":"+bi.tag, "docker://"+h.reg.host+"/"+bi.Repo+":rafs-startup",
		"--prefetch-patterns", patterns); err != nil {
		return err
	}
	h.logf("%s: converted with the startup set as prefetch patterns in %.1fs (%d chunks in the prefetch blob)", bi.Name,
		time.Since(start).Seconds(), bi.ConvertStartup.Stats.PrefetchChunks)
	return nil
}

// convert runs `damselfly convert SRC DST --json EXTRA...`, bounded by
// stepTimeout.
func (h *rig) convert(ctx context.Context, src, dst string, extra ...string) (*convert.Result, error) {
	ctx, cancel := context.WithTimeout(ctx, stepTimeout)
	defer cancel()
	return harness.Convert(ctx, h.bin, src, dst, extra...)
}

// describe records the machine and tool versions.
func (h *rig) describe(ctx context.Context) {
	h.env["machine"] = fmt.Sprintf("%d cores, %s/%s, %s", runtime.NumCPU(), runtime.GOOS, runtime.GOARCH, runtime.Version())
	for k, argv := range map[string][]string{
		"kernel": {"uname", "-r"}, "skopeo": {"skopeo", "--version"}, "umoci": {"umoci", "--version"},
		"docker-registry": {"docker-registry", "--version"}, "commit": {"git", "-C", h.root, "describe", "--always", "--dirty"},
	} {
		if out, err := runCmd(ctx, argv...); err == nil {
			h.env[k] = strings.TrimSpace(string(out))
		}
	}
}

// close stops the registry and removes the work directory (unless -keep).
func (h *rig) close() {
	if h.reg != nil {
		if err := h.reg.Stop(); err != nil {
			h.logf("%v", err)
		}
	}
	if !h.o.keep && h.work != "" {
		os.RemoveAll(h.work)
	}
}

// logWriter passes the image builders' progress through logf.
type logWriter struct{ h *rig }

func (w logWriter) Write(b []byte) (int, error) {
	w.h.logf("%s", strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
