package main

import (
	"archive/tar"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/image"
	"damselfly/rafs/rafstest"
)

// inspectJSON is what `inspect --json` prints.
type inspectJSON struct {
	Image   string       `json:"image"`
	Digest  string       `json:"digest"`
	Summary rafs.Summary `json:"summary"`
	Blobs   []string     `json:"blobs"`
}

func inspect(t *testing.T, ref string) inspectJSON {
	t.Helper()
	r := mustRun(t, nil, "inspect", "--json", ref)
	var out inspectJSON
	if err := json.Unmarshal([]byte(r.stdout), &out); err != nil {
		t.Fatalf("inspect --json: %v; output:\n%s", err, r.stdout)
	}
	return out
}

// TestCLI converts a corpus image with the binary, then inspects, checks
// and unpacks it, and checks a copy with one damaged chunk.
func TestCLI(t *testing.T) {
	t.Parallel()
	layout := writeCorpus(t, "base-v1")
	ref := "oci:" + layout + ":base-v1-rafs"

	r := mustRun(t, nil, "convert", "--json", "--chunk-size", strconv.Itoa(testChunk), "--work-dir", t.TempDir(), "oci:"+layout+":base-v1", ref)
	var res convert.Result
	if err := json.Unmarshal([]byte(r.stdout), &res); err != nil {
		t.Fatalf("convert --json: %v; output:\n%s", err, r.stdout)
	}
	if !strings.HasPrefix(res.Digest, "sha256:") || res.Destination != ref {
		t.Fatalf("convert --json: got digest %q to %q, want a sha256 digest to %s", res.Digest, res.Destination, ref)
	}
	img, err := image.Open(t.Context(), ref, image.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	if img.Digest.String() != res.Digest {
		t.Errorf("convert printed digest %s, the image has %s", res.Digest, img.Digest)
	}

	t.Run("inspect json", func(t *testing.T) {
		got := inspect(t, ref)
		want, err := rafs.Summarize(img.Bootstrap())
		if err != nil {
			t.Fatal(err)
		}
		if got.Summary != want {
			t.Errorf("summary: got %+v, want %+v", got.Summary, want)
		}
		if got.Digest != res.Digest || got.Image != ref {
			t.Errorf("got image %s digest %s, want %s %s", got.Image, got.Digest, ref, res.Digest)
		}
		if got.Summary.ChunkSize != testChunk || len(got.Blobs) != int(img.Bootstrap().BlobCount()) {
			t.Errorf("got chunk size %d and %d blobs, want %d and %d", got.Summary.ChunkSize, len(got.Blobs), testChunk, img.Bootstrap().BlobCount())
		}
	})

	t.Run("inspect tree", func(t *testing.T) {
		out := mustRun(t, nil, "inspect", "--tree", ref).stdout
		lines := map[string]string{} // path -> line
		for l := range strings.Lines(out) {
			if f := strings.Fields(l); len(f) >= 4 && strings.HasPrefix(f[3], "/") {
				lines[f[3]] = strings.TrimSpace(l)
			}
		}
		n := 0
		err := fs.WalkDir(img.FS(t.Context()), ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			n++
			if _, ok := lines[path.Join("/", p)]; !ok {
				t.Errorf("inspect --tree does not list %s", path.Join("/", p))
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if len(lines) != n {
			t.Errorf("inspect --tree lists %d paths, want %d", len(lines), n)
		}
		for p, want := range map[string]string{
			"/usr/bin/sh":   "/usr/bin/sh -> tool",
			"/home/someone": "drwxr-x---  1000:1000",
		} {
			if !strings.Contains(lines[p], want) {
				t.Errorf("line of %s: got %q, want it to contain %q", p, lines[p], want)
			}
		}
	})

	t.Run("check clean", func(t *testing.T) {
		r := mustRun(t, nil, "check", ref)
		want := fmt.Sprintf("checked %d chunks in %d blobs", img.Bootstrap().ChunkCount(), img.Bootstrap().BlobCount())
		if !strings.Contains(r.stdout, want) || !strings.Contains(r.stdout, ": 0 problems") || strings.Contains(r.stdout, "BAD") {
			t.Errorf("check output: got %q, want %q and 0 problems", r.stdout, want)
		}
	})

	t.Run("check corrupt", func(t *testing.T) {
		bad := copyLayout(t, layout)
		in, err := img.Bootstrap().LookupPath("/usr/bin/tool")
		if err != nil {
			t.Fatal(err)
		}
		c, err := img.Bootstrap().FileChunk(in, 1)
		if err != nil {
			t.Fatal(err)
		}
		bl, err := img.Bootstrap().Blob(c.Blob)
		if err != nil {
			t.Fatal(err)
		}
		flipByte(t, rafs.BlobPath(filepath.Join(bad, "blobs", "sha256"), bl.Digest), int64(c.CompressedOffset+uint64(c.CompressedSize)/2))
		badRef := "oci:" + bad + ":base-v1-rafs"

		r := run(t, nil, "check", badRef)
		if r.code == 0 {
			t.Errorf("check of a corrupt image: got exit code 0, want non-zero; output:\n%s", r.stdout)
		}
		for _, want := range []string{
			fmt.Sprintf("BAD chunk %d %s (blob %s at %d)", c.Index, c.Digest, bl.Digest, c.CompressedOffset),
			"    used by /usr/bin/tool\n",
			fmt.Sprintf("BAD blob %s", bl.Digest),
			": 2 problems",
		} {
			if !strings.Contains(r.stdout, want) {
				t.Errorf("check output: got\n%s\nwant it to contain %q", r.stdout, want)
			}
		}

		r = run(t, nil, "check", "--json", badRef)
		var cr image.CheckResult
		if err := json.Unmarshal([]byte(r.stdout), &cr); err != nil {
			t.Fatalf("check --json: %v; output:\n%s", err, r.stdout)
		}
		if r.code == 0 || len(cr.Problems) != 2 {
			t.Errorf("check --json: got exit code %d and %d problems, want non-zero and 2", r.code, len(cr.Problems))
		}

		// unpack verifies every chunk and removes DEST when one is bad.
		dest := filepath.Join(t.TempDir(), "rootfs")
		r = run(t, nil, "unpack", badRef, dest)
		if r.code == 0 || !strings.Contains(r.stderr, "usr/bin/tool") {
			t.Errorf("unpack of a corrupt image: got exit code %d, stderr %q; want non-zero naming usr/bin/tool", r.code, r.stderr)
		}
		if _, err := os.Lstat(dest); !os.IsNotExist(err) {
			t.Errorf("after a failed unpack: got %v for the destination, want it removed", err)
		}
	})

	t.Run("unpack dir and tar", func(t *testing.T) {
		dir := filepath.Join(t.TempDir(), "rootfs")
		tarFile := filepath.Join(t.TempDir(), "rootfs.tar")
		mustRun(t, nil, "unpack", ref, dir)
		mustRun(t, nil, "unpack", ref, tarFile)
		fromDir, fromTar := dirFiles(t, dir), tarFiles(t, tarFile)
		if len(fromDir) < 50 {
			t.Fatalf("unpacked %d paths, want the whole image", len(fromDir))
		}
		for p, want := range fromDir {
			if got, ok := fromTar[p]; !ok || got != want {
				t.Errorf("%s: tar has %q, directory %q", p, got, want)
			}
		}
		for p := range fromTar {
			if _, ok := fromDir[p]; !ok {
				t.Errorf("%s: in the tar, not in the directory", p)
			}
		}
		ents, err := os.ReadDir(filepath.Dir(tarFile))
		if err != nil || len(ents) != 1 {
			t.Errorf("the tar's directory holds %d entries (%v), want 1: no temporary file left", len(ents), err)
		}
	})
}

// dirFiles describes each path under root: type, permissions, and content
// hash or link target.
func dirFiles(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil || rel == "." {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case d.IsDir():
			out[rel] = fmt.Sprintf("dir %o", info.Mode().Perm())
		case d.Type()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[rel] = "symlink " + target
		case d.Type().IsRegular():
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[rel] = fmt.Sprintf("file %o %x", info.Mode().Perm(), sha256.Sum256(data))
		default:
			out[rel] = "other " + d.Type().String()
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// tarFiles describes each entry of a tar file as dirFiles does, hardlinks
// as the file they link to.
func tarFiles(t *testing.T, file string) map[string]string {
	t.Helper()
	f, err := os.Open(file)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	out := map[string]string{}
	tr := tar.NewReader(f)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		name := path.Clean(h.Name)
		if name == "." {
			continue
		}
		perm := fs.FileMode(h.Mode).Perm()
		switch h.Typeflag {
		case tar.TypeDir:
			out[name] = fmt.Sprintf("dir %o", perm)
		case tar.TypeSymlink:
			out[name] = "symlink " + h.Linkname
		case tar.TypeReg:
			hash := sha256.New()
			if _, err := io.Copy(hash, tr); err != nil {
				t.Fatal(err)
			}
			out[name] = fmt.Sprintf("file %o %x", perm, hash.Sum(nil))
		case tar.TypeLink:
			out[name] = out[path.Clean(h.Linkname)]
		default:
			out[name] = fmt.Sprintf("other %c", h.Typeflag)
		}
	}
	return out
}

// copyLayout copies an OCI layout, so a test may damage its blobs.
func copyLayout(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "oci")
	if err := os.CopyFS(dst, os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	return dst
}

func flipByte(t *testing.T, path string, off int64) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var b [1]byte
	if _, err := f.ReadAt(b[:], off); err != nil {
		t.Fatal(err)
	}
	b[0] ^= 0xff
	if _, err := f.WriteAt(b[:], off); err != nil {
		t.Fatal(err)
	}
}

// TestCLISettings: the chunk size comes from the config file, then the
// environment, then the flag, each overriding the one before.
func TestCLISettings(t *testing.T) {
	t.Parallel()
	layout := writeCorpus(t, "base-v1")
	config := filepath.Join(t.TempDir(), "damselfly.yaml")
	if err := os.WriteFile(config, []byte("convert:\n  chunk_size: 131072\n  work_dir: "+strconv.Quote(t.TempDir())+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	const env = "DAMSELFLY_CONVERT_CHUNK_SIZE=262144"
	for _, tc := range []struct {
		name   string
		config bool
		env    []string
		flag   string
		want   uint32
	}{
		{name: "default", want: rafs.DefaultChunkSize},
		{name: "config file", config: true, want: 131072},
		{name: "environment", env: []string{env}, want: 262144},
		{name: "environment over file", config: true, env: []string{env}, want: 262144},
		{name: "flag over both", config: true, env: []string{env}, flag: "65536", want: 65536},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			dst := "oci:" + filepath.Join(t.TempDir(), "out") + ":x"
			args := []string{"convert"}
			if tc.config {
				args = append(args, "--config", config)
			}
			if tc.flag != "" {
				args = append(args, "--chunk-size", tc.flag)
			}
			mustRun(t, tc.env, append(args, "oci:"+layout+":base-v1", dst)...)
			if got := inspect(t, dst).Summary.ChunkSize; got != tc.want {
				t.Errorf("chunk size: got %d, want %d", got, tc.want)
			}
		})
	}
}

// TestCLIPrintConfig: every command that reads configuration prints its
// effective settings with --print-config, with no other argument (it
// needs no image or path), and the settings name a key of its own.
func TestCLIPrintConfig(t *testing.T) {
	t.Parallel()
	for cmd, key := range map[string]string{
		"peer": "proxy:", "scheduler": "listen:", "mount": "backend:", "snapshotter": "root:",
		"convert": "chunk_size:", "demo": "scale:", "check": "parallel:", "unpack": "workers:", "inspect": "tree:",
	} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			args := []string{cmd, "--print-config"}
			if cmd == "scheduler" {
				args = append(args, "--dir", t.TempDir())
			}
			r := mustRun(t, nil, args...)
			if !strings.Contains(r.stdout, key) {
				t.Errorf("%s --print-config: no %q in\n%s", cmd, key, r.stdout)
			}
		})
	}
}

// TestCLIErrors: a failing command exits non-zero and says why on stderr.
func TestCLIErrors(t *testing.T) {
	t.Parallel()
	layout := writeCorpus(t, "symlinks")
	if _, err := convert.Convert(t.Context(), "oci:"+layout+":symlinks", "oci:"+layout+":symlinks-rafs", convert.Options{WorkDir: t.TempDir()}); err != nil {
		t.Fatal(err)
	}
	missing := filepath.Join(t.TempDir(), "missing")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"missing argument", []string{"convert", "oci:" + layout + ":symlinks"}, "accepts 2 arg(s)"},
		{"missing source", []string{"convert", "oci:" + missing + ":x", "oci:" + missing + ":y"}, "not found"},
		{"bad chunk size", []string{"convert", "--chunk-size", "1000", "oci:" + layout + ":symlinks", "oci:" + missing + ":y"}, "chunk size 1000"},
		{"bad compressor", []string{"convert", "--compressor", "lz4", "oci:" + layout + ":symlinks", "oci:" + missing + ":y"}, "lz4"},
		{"inspect plain image", []string{"inspect", "oci:" + layout + ":symlinks"}, "not a RAFS image"},
		{"unpack plain image", []string{"unpack", "oci:" + layout + ":symlinks", filepath.Join(missing, "rootfs")}, "not a RAFS image"},
		{"unpack into a non-empty directory", []string{"unpack", "oci:" + layout + ":symlinks-rafs", layout}, "is not empty"},
		{"unpack into a file", []string{"unpack", "oci:" + layout + ":symlinks-rafs", filepath.Join(layout, "index.json")}, "is not a directory"},
		{"check a missing bootstrap", []string{"check", missing}, "no such file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			r := run(t, nil, tc.args...)
			if r.code == 0 || !strings.Contains(r.stderr, tc.want) || !strings.HasPrefix(r.stderr, "damselfly: ") {
				t.Errorf("got exit code %d, stderr %q; want non-zero and %q", r.code, r.stderr, tc.want)
			}
			// A destination that was there before stays.
			if _, err := os.Stat(filepath.Join(layout, "index.json")); err != nil {
				t.Errorf("after the failure: %v, want the layout intact", err)
			}
		})
	}
}

// TestCLIDemo runs the README's main command: with FUSE (this test runs
// as root, as CI does) and through the library view. It must end with
// "demo: OK", show node 2 reading nothing from the registry, and leave no
// file, mount or process behind.
func TestCLIDemo(t *testing.T) {
	rafstest.RequireRoot(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"fuse", []string{"demo", "--scale", "0.2"}, "mounting the image"},
		{"library", []string{"demo", "--scale", "0.2", "--no-fuse"}, "reading through the library view"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tmp := t.TempDir()
			r := mustRun(t, []string{"TMPDIR=" + tmp}, tc.args...)
			if !strings.HasSuffix(r.stdout, "\ndemo: OK\n") {
				t.Errorf("demo output: got\n%s\nwant it to end with demo: OK", r.stdout)
			}
			if !strings.Contains(r.stdout, tc.want) {
				t.Errorf("demo output does not say %q:\n%s", tc.want, r.stdout)
			}
			// The report's node2 row: name, mount-ready, read, node
			// cache, peers, registry, hit ratio.
			row := regexp.MustCompile(`(?m)^    node2 .*$`).FindString(r.stdout)
			cols := regexp.MustCompile(`\s{2,}`).Split(strings.TrimSpace(row), -1)
			if len(cols) < 7 || cols[4] == "0 B" || cols[5] != "0 B" {
				t.Errorf("demo report: node2's row %q: want bytes from peers and 0 B from the registry", row)
			}
			if ents, err := os.ReadDir(tmp); err != nil || len(ents) != 0 {
				t.Errorf("demo left %d entries (%v) in its temporary directory, want none", len(ents), err)
			}
			if mi, err := os.ReadFile("/proc/self/mountinfo"); err == nil && strings.Contains(string(mi), tmp) {
				t.Errorf("demo left a mount under %s", tmp)
			}
		})
	}
}
