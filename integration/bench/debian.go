package bench

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
)

// DebianLayer names the packages a layer adds. The layer holds the files
// of those packages and of every dependency (without recommends) that the
// layers below it lack, as `apt-get install --no-install-recommends` in
// one Dockerfile step would add them.
type DebianLayer struct {
	Name     string
	Packages []string
}

// DebianImage is one tagged image, bottom layer first.
type DebianImage struct {
	Tag    string
	Layers []DebianLayer
}

var (
	debianBase = DebianLayer{Name: "base", Packages: []string{
		"base-files", "bash", "coreutils", "dash", "debianutils", "diffutils", "findutils", "grep", "gzip",
		"sed", "tar", "util-linux", "libc-bin", "tzdata", "ca-certificates",
		"python3", "python3.11", "libpython3.11-stdlib"}}
	debianNumpy = DebianLayer{Name: "numpy", Packages: []string{"python3-numpy", "libopenblas0-pthread", "libgfortran5"}}
	debianScipy = DebianLayer{Name: "scipy", Packages: []string{"python3-scipy", "python3-pandas"}}
)

// DebianImages are the realistic images: "v1" is a Python/NumPy/SciPy
// stack in three layers; "v2" shares its base and NumPy layers (byte for
// byte) and adds one package, scikit-learn, to the top layer.
var DebianImages = []DebianImage{
	{Tag: "v1", Layers: []DebianLayer{debianBase, debianNumpy, debianScipy}},
	{Tag: "v2", Layers: []DebianLayer{debianBase, debianNumpy,
		{Name: "scipy-sklearn", Packages: append(slices.Clone(debianScipy.Packages), "python3-sklearn")}}},
}

var debianConfig = ImageConfig{
	Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"},
	Cmd: []string{"python3"},
}

// debPackage is one resolved package.
type debPackage struct {
	Name, Version, Arch string
}

// file is the name `apt-get download` gives the package's .deb.
func (p debPackage) file() string {
	return fmt.Sprintf("%s_%s_%s.deb", p.Name, strings.ReplaceAll(p.Version, ":", "%3a"), p.Arch)
}

// DebianLayout makes sure the OCI layout at cache/debian/layout holds
// DebianImages (tags v1 and v2), building it from the Debian archive if
// it is missing or was built from other package lists. Downloaded .debs
// stay in cache/debian/debs. It returns the layout's path.
func DebianLayout(ctx context.Context, cache string, log io.Writer) (string, error) {
	root := filepath.Join(cache, "debian")
	dir := filepath.Join(root, "layout")
	stamp := filepath.Join(root, "layout.json")
	spec, _ := json.Marshal(DebianImages)
	if old, err := os.ReadFile(stamp); err == nil {
		var s debianStamp
		if json.Unmarshal(old, &s) == nil && s.Spec == fmt.Sprintf("%x", sha256.Sum256(spec)) {
			return dir, nil
		}
	}
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	b := &debianBuilder{root: root, layout: dir, log: log, layers: map[string]*LayerBlob{}}
	s := debianStamp{Spec: fmt.Sprintf("%x", sha256.Sum256(spec)), Images: map[string][][]string{}}
	for _, img := range DebianImages {
		fmt.Fprintf(log, "debian: building image %s\n", img.Tag)
		blobs, pkgs, err := b.image(ctx, img)
		if err != nil {
			return "", fmt.Errorf("debian image %s: %w", img.Tag, err)
		}
		if err := AppendImage(dir, img.Tag, debianConfig, blobs); err != nil {
			return "", fmt.Errorf("debian image %s: %w", img.Tag, err)
		}
		s.Images[img.Tag] = pkgs
	}
	data, _ := json.MarshalIndent(s, "", "  ")
	return dir, os.WriteFile(stamp, data, 0o644)
}

// debianStamp records what a cached layout was built from.
type debianStamp struct {
	Spec   string                `json:"spec"`
	Images map[string][][]string `json:"images"` // tag -> layer -> package=version
}

type debianBuilder struct {
	root, layout string
	log          io.Writer
	layers       map[string]*LayerBlob // by package set, so shared layers are packed once
}

func (b *debianBuilder) image(ctx context.Context, img DebianImage) ([]*LayerBlob, [][]string, error) {
	var cum []string
	below := map[string]bool{}
	var blobs []*LayerBlob
	var pkgs [][]string
	for _, l := range img.Layers {
		cum = append(cum, l.Packages...)
		all, err := b.resolve(ctx, cum)
		if err != nil {
			return nil, nil, fmt.Errorf("layer %s: %w", l.Name, err)
		}
		var mine []debPackage
		var names []string
		for _, p := range all {
			if !below[p.Name] {
				mine = append(mine, p)
				names = append(names, p.Name+"="+p.Version)
			}
		}
		for _, p := range all {
			below[p.Name] = true
		}
		key := strings.Join(names, " ")
		blob := b.layers[key]
		if blob == nil {
			if blob, err = b.layer(ctx, l.Name, mine); err != nil {
				return nil, nil, fmt.Errorf("layer %s: %w", l.Name, err)
			}
			b.layers[key] = blob
		}
		blobs = append(blobs, blob)
		pkgs = append(pkgs, names)
	}
	return blobs, pkgs, nil
}

// layer downloads and unpacks pkgs into a fresh tree and packs it.
func (b *debianBuilder) layer(ctx context.Context, name string, pkgs []debPackage) (*LayerBlob, error) {
	if err := b.download(ctx, pkgs); err != nil {
		return nil, err
	}
	tree, err := os.MkdirTemp(b.root, "tree-"+name+"-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tree)
	for _, p := range pkgs {
		if out, err := exec.CommandContext(ctx, "dpkg-deb", "-x", filepath.Join(b.root, "debs", p.file()), tree).CombinedOutput(); err != nil {
			return nil, fmt.Errorf("dpkg-deb -x %s: %w: %s", p.file(), err, out)
		}
	}
	fmt.Fprintf(b.log, "debian: packing layer %s (%d packages)\n", name, len(pkgs))
	blob, err := WriteTreeLayer(ctx, b.layout, tree)
	if err != nil {
		return nil, err
	}
	blob.CreatedBy = "apt-get install --no-install-recommends " + strings.Join(packageNames(pkgs), " ")
	fmt.Fprintf(b.log, "debian: layer %s: %d MB tar, %d MB gzip\n", name, blob.tarSize>>20, blob.size>>20)
	return blob, nil
}

func packageNames(pkgs []debPackage) []string {
	var out []string
	for _, p := range pkgs {
		out = append(out, p.Name)
	}
	return out
}

// download fetches the .debs of pkgs that are not in the cache yet.
func (b *debianBuilder) download(ctx context.Context, pkgs []debPackage) error {
	debs := filepath.Join(b.root, "debs")
	if err := os.MkdirAll(debs, 0o755); err != nil {
		return err
	}
	var want []string
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(debs, p.file())); err != nil {
			want = append(want, p.Name+"="+p.Version)
		}
	}
	if len(want) == 0 {
		return nil
	}
	fmt.Fprintf(b.log, "debian: downloading %d packages\n", len(want))
	cmd := exec.CommandContext(ctx, "apt-get", append([]string{"download", "-q"}, want...)...)
	cmd.Dir = debs
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("apt-get download: %w: %s", err, lastLines(out, 10))
	}
	for _, p := range pkgs {
		if _, err := os.Stat(filepath.Join(debs, p.file())); err != nil {
			return fmt.Errorf("apt-get download left no %s", p.file())
		}
	}
	return nil
}

// resolve returns the packages (sorted by name) that installing pkgs
// without recommends on an empty system takes, as apt's resolver picks
// them. When the package lists lack a package it runs apt-get update once.
func (b *debianBuilder) resolve(ctx context.Context, pkgs []string) ([]debPackage, error) {
	status := filepath.Join(b.root, "empty-dpkg-status")
	if err := os.MkdirAll(b.root, 0o755); err != nil {
		return nil, err
	}
	if err := os.WriteFile(status, nil, 0o644); err != nil {
		return nil, err
	}
	args := append([]string{"-s", "-q", "-o", "Dir::State::status=" + status, "-o", "Debug::NoLocking=1",
		"-o", "APT::Install-Recommends=false", "install"}, pkgs...)
	out, err := exec.CommandContext(ctx, "apt-get", args...).CombinedOutput()
	if err != nil && (bytes.Contains(out, []byte("Unable to locate package")) || bytes.Contains(out, []byte("no installation candidate"))) {
		fmt.Fprintln(b.log, "debian: apt-get update")
		if uo, uerr := exec.CommandContext(ctx, "apt-get", "update", "-qq").CombinedOutput(); uerr != nil {
			return nil, fmt.Errorf("apt-get update: %w: %s", uerr, lastLines(uo, 10))
		}
		out, err = exec.CommandContext(ctx, "apt-get", args...).CombinedOutput()
	}
	if err != nil {
		return nil, fmt.Errorf("apt-get -s install: %w: %s", err, lastLines(out, 10))
	}
	res, err := parseSimulation(out)
	if err != nil {
		return nil, err
	}
	if len(res) == 0 {
		return nil, errors.New("apt-get -s install selected no package")
	}
	return res, nil
}

// parseSimulation reads the "Inst NAME (VERSION ORIGINS [ARCH])" lines of
// `apt-get -s install`.
func parseSimulation(out []byte) ([]debPackage, error) {
	var res []debPackage
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, "Inst ") {
			continue
		}
		f := strings.Fields(line)
		open, close := strings.Index(line, "["), strings.Index(line, "]")
		if len(f) < 3 || !strings.HasPrefix(f[2], "(") || open < 0 || close < open {
			return nil, fmt.Errorf("cannot parse apt-get line %q", line)
		}
		res = append(res, debPackage{Name: f[1], Version: strings.TrimPrefix(f[2], "("), Arch: line[open+1 : close]})
	}
	slices.SortFunc(res, func(a, b debPackage) int { return strings.Compare(a.Name, b.Name) })
	return res, sc.Err()
}

func lastLines(b []byte, n int) string {
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}
