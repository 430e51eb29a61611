// Package layering holds the test that keeps damselfly's imports running
// downward (README, "Architecture"):
//
//	cmd/damselfly -> {fusemount, peer, scheduler, proxy} -> rafs/...
//
// rafs/ is the bottom layer: the image format and the small contracts
// every daemon shares (the registry client, the chunk API, piece tables,
// routes, the node cache). It imports no daemon. A daemon imports rafs/
// and its own subtree, never another daemon's: what two sides share
// belongs below both. The only exceptions are the daemons' assemblies
// (peer/daemon, scheduler/daemon), which wire parts of several together. Test fixtures (rafs/rafstest, integration/...) never
// reach the shipped binary.
package layering

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
)

const module = "damselfly"

// daemons are the four components between cmd and rafs.
var daemons = []string{"fusemount", "peer", "scheduler", "proxy"}

// assembly lists the packages allowed to import another daemon's
// packages, and which (exactly those packages, not their subtrees): the
// peer daemon's assembly serves the node through the proxy and reports
// to the scheduler through its client, whose API speaks the scheduler's
// types; the scheduler daemon's runs its server on the cluster's libp2p
// host, which peer/host builds for both daemons.
var assembly = map[string][]string{
	"peer/daemon":      {"proxy", "scheduler", "scheduler/client"},
	"scheduler/daemon": {"peer/host"},
}

// forbiddenInRafs are third-party trees the bottom layer must not pull in
// (DESIGN.md: rafs imports neither libp2p nor go-fuse), and
// allowedInRafs the one exception: libp2p's identity types, since a peer
// ID and its addresses are how the contracts between daemons (routes)
// name a peer. The host stack, transports and protocols stay out.
var (
	forbiddenInRafs = []string{"github.com/libp2p/", "github.com/hanwen/go-fuse"}
	allowedInRafs   = []string{"github.com/libp2p/go-libp2p/core/peer"}
)

// fixtures may be imported only by tests and by integration/.
var fixtures = []string{"rafs/rafstest", "integration"}

// imports returns the non-test imports of every package under root, by
// package path relative to the module.
func imports(t *testing.T, root string) map[string][]string {
	t.Helper()
	out := map[string][]string{}
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			name := d.Name()
			if path != root && (strings.HasPrefix(name, ".") || name == "testdata") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(fset, path, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(root, filepath.Dir(path))
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(rel)
		for _, im := range f.Imports {
			p, err := strconv.Unquote(im.Path.Value)
			if err != nil {
				return err
			}
			if !slices.Contains(out[pkg], p) {
				out[pkg] = append(out[pkg], p)
			}
		}
		if _, ok := out[pkg]; !ok {
			out[pkg] = nil
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// under reports whether pkg is dir or inside it.
func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// daemonOf is the daemon pkg belongs to, or "".
func daemonOf(pkg string) string {
	for _, d := range daemons {
		if under(pkg, d) {
			return d
		}
	}
	return ""
}

// violation says why pkg may not import im (a path inside the module,
// relative to it), or "".
func violation(pkg, im string) string {
	for _, f := range fixtures {
		if under(im, f) && !under(pkg, "integration") && !under(pkg, "rafs/rafstest") {
			return "a test fixture outside tests"
		}
	}
	switch {
	case under(pkg, "rafs"):
		if !under(im, "rafs") {
			return "rafs/ is the bottom layer and imports no daemon"
		}
	case daemonOf(pkg) != "":
		if under(im, "cmd") || im == "configs" {
			return "a daemon imports neither cmd nor the configs loader (only they touch viper)"
		}
		if d := daemonOf(im); d != "" && d != daemonOf(pkg) {
			if slices.Contains(assembly[pkg], im) {
				return ""
			}
			return "a daemon imports another daemon's package; a type both share belongs in rafs/"
		}
	case under(pkg, "configs"):
		if under(im, "cmd") {
			return "configs is below cmd"
		}
	}
	return ""
}

func TestImportsRunDownward(t *testing.T) {
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "go.mod")); err != nil {
		t.Fatalf("module root %s: %v", root, err)
	}
	all := imports(t, root)
	if len(all) < 20 {
		t.Fatalf("found %d packages under %s; the walk is broken", len(all), root)
	}
	var bad []string
	for pkg, ims := range all {
		for _, im := range ims {
			if under(pkg, "rafs") {
				for _, f := range forbiddenInRafs {
					if strings.HasPrefix(im, f) && !slices.Contains(allowedInRafs, im) {
						bad = append(bad, pkg+" -> "+im+": rafs/ imports neither libp2p (but its peer identity types) nor go-fuse")
					}
				}
			}
			rel, ok := strings.CutPrefix(im, module+"/")
			if !ok {
				continue
			}
			if why := violation(pkg, rel); why != "" {
				bad = append(bad, pkg+" -> "+rel+": "+why)
			}
		}
	}
	sort.Strings(bad)
	for _, b := range bad {
		t.Error(b)
	}
}

// The rules themselves, on the arrows the project once had.
func TestViolation(t *testing.T) {
	for _, tc := range []struct {
		pkg, im string
		bad     bool
	}{
		{"peer", "proxy", true},
		{"proxy", "peer/piece", true},
		{"fusemount/backend", "proxy", true},
		{"scheduler/client", "peer", true},
		{"peer", "scheduler/preheatwire", true},
		{"scheduler/server", "peer/host", true},
		{"cmd/damselfly", "integration/sample", true},
		{"cmd/damselfly", "rafs/rafstest", true},
		{"rafs/convert", "peer/cache", true},
		{"fusemount", "peer/cache", true},
		{"peer", "configs", true},
		{"peer/daemon", "configs/field", false},
		{"scheduler/daemon", "peer/host", false},
		{"scheduler/daemon", "peer", true},
		{"peer/daemon", "proxy", false},
		{"peer/daemon", "scheduler/client", false},
		{"peer/daemon", "scheduler/server", true},
		{"peer/daemon", "scheduler", false},
		{"peer/daemon", "proxy/internal/x", true},
		{"peer", "rafs/registry", false},
		{"proxy", "rafs/chunkapi", false},
		{"peer/exchange", "rafs/cache", false},
		{"cmd/damselfly", "proxy", false},
		{"integration/cluster", "rafs/rafstest", false},
		{"rafs/rafstest", "rafs", false},
	} {
		if got := violation(tc.pkg, tc.im) != ""; got != tc.bad {
			t.Errorf("%s -> %s: violation %v, want %v", tc.pkg, tc.im, got, tc.bad)
		}
	}
}
