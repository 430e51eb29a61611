package sample

import (
	"archive/tar"
	"fmt"
	"io"
	"math/rand/v2"
	"strings"
	"time"
)

// Options size the image.
type Options struct {
	Seed uint64
	// Scale multiplies file counts and sizes; 1 gives about 60 MB.
	Scale float64
}

var words = strings.Fields(`def class return import from self if else elif for while in not and or
None True False try except finally raise with as yield lambda pass break continue global assert
value result data config path name args kwargs index count items keys len range list dict set tuple
str int float bool print open read write close append extend update get format join split strip
numpy array shape dtype axis reshape matrix vector tensor model layer weight bias grad loss optimizer
logger debug info warning error request response client server session cache buffer stream chunk`)

var mtime = time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)

type gen struct {
	r     *rand.Rand
	scale float64
}

func (g *gen) n(base int) int { return max(1, int(float64(base)*g.scale)) }

// text returns source-like text of about size bytes.
func (g *gen) text(size int) []byte {
	var b strings.Builder
	indent := 0
	for b.Len() < size {
		b.WriteString(strings.Repeat("    ", indent))
		for k := 2 + g.r.IntN(8); k > 0; k-- {
			b.WriteString(words[g.r.IntN(len(words))])
			b.WriteByte(' ')
		}
		if g.r.IntN(4) == 0 {
			fmt.Fprintf(&b, "= %d", g.r.IntN(1000))
		}
		b.WriteByte('\n')
		indent = (indent + g.r.IntN(3) - 1 + 4) % 4
	}
	return []byte(b.String()[:size])
}

// binary returns machine-code-like bytes: runs of random bytes mixed with
// repeated instruction-like patterns, compressing about 2x.
func (g *gen) binary(size int) []byte {
	out := make([]byte, 0, size)
	pat := make([]byte, 64)
	for len(out) < size {
		if g.r.IntN(2) == 0 {
			for i := range pat {
				pat[i] = byte(g.r.IntN(16))
			}
			for k := 1 + g.r.IntN(8); k > 0; k-- {
				out = append(out, pat...)
			}
		} else {
			for k := 256 + g.r.IntN(512); k > 0; k-- {
				out = append(out, byte(g.r.Uint32()))
			}
		}
	}
	return out[:size]
}

func file(name string, data []byte, mode int64) Entry {
	return Entry{
		Hdr:  tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: mode, Size: int64(len(data)), ModTime: mtime, Format: tar.FormatPAX},
		Data: func(w io.Writer) error { _, err := w.Write(data); return err },
	}
}

func dir(name string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeDir, Name: name + "/", Mode: 0o755, ModTime: mtime, Format: tar.FormatPAX}}
}

func symlink(name, target string) Entry {
	return Entry{Hdr: tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777, ModTime: mtime, Format: tar.FormatPAX}}
}

// Generate returns the sample image named name.
func Generate(name string, o Options) Image {
	if o.Scale <= 0 {
		o.Scale = 1
	}
	g := &gen{r: rand.New(rand.NewPCG(o.Seed, 42)), scale: o.Scale}
	base := Layer{dir("etc"), dir("usr"), dir("usr/bin"), dir("usr/lib"), dir("usr/lib/x86_64-linux-gnu"), dir("usr/share"), dir("usr/share/doc"), symlink("bin", "usr/bin"), symlink("lib", "usr/lib")}
	for i := range g.n(60) {
		base = append(base, file(fmt.Sprintf("etc/conf%03d.conf", i), g.text(200+g.r.IntN(3000)), 0o644))
	}
	for i := range g.n(40) {
		base = append(base, file(fmt.Sprintf("usr/bin/tool%02d", i), g.binary(20<<10+g.r.IntN(400<<10)), 0o755))
	}
	for i := range g.n(50) {
		base = append(base, file(fmt.Sprintf("usr/lib/x86_64-linux-gnu/lib%02d.so.1", i), g.binary(50<<10+g.r.IntN(1200<<10)), 0o644))
	}
	for i := range g.n(200) {
		d := fmt.Sprintf("usr/share/doc/pkg%03d", i)
		base = append(base, dir(d), file(d+"/copyright", g.text(500+g.r.IntN(4000)), 0o644))
	}
	py := Layer{dir("usr/lib/python3"), dir("usr/lib/python3/site-packages")}
	for p := range g.n(30) {
		d := fmt.Sprintf("usr/lib/python3/site-packages/pkg%02d", p)
		py = append(py, dir(d))
		for m := range 10 + g.r.IntN(60) {
			py = append(py, file(fmt.Sprintf("%s/mod%03d.py", d, m), g.text(500+g.r.IntN(30<<10)), 0o644))
		}
		py = append(py, file(d+"/_native.so", g.binary(100<<10+g.r.IntN(2<<20)), 0o755))
	}
	app := Layer{dir("app"), dir("app/models")}
	for i := range g.n(40) {
		app = append(app, file(fmt.Sprintf("app/src%02d.py", i), g.text(1000+g.r.IntN(20<<10)), 0o644))
	}
	weights := make([]byte, g.n(8<<20))
	for i := range weights {
		weights[i] = byte(g.r.Uint32() & 0x3f)
	}
	app = append(app, file("app/models/weights.bin", weights, 0o644),
		Entry{Hdr: tar.Header{Typeflag: tar.TypeReg, Name: "usr/share/doc/pkg000/.wh.copyright", ModTime: mtime, Format: tar.FormatPAX}})
	return Image{Name: name, Layers: []Layer{base, py, app}}
}

// StartupSet returns the paths a process starting from the image reads:
// its entry points and configuration, about 5% of the files.
func StartupSet(img Image) []string {
	gone := map[string]bool{}
	for _, l := range img.Layers {
		for _, e := range l {
			if i := strings.LastIndex(e.Hdr.Name, "/.wh."); i >= 0 {
				gone[e.Hdr.Name[:i+1]+e.Hdr.Name[i+5:]] = true
			}
		}
	}
	var out []string
	k := 0
	for _, l := range img.Layers {
		for _, e := range l {
			if e.Hdr.Typeflag != tar.TypeReg || strings.Contains(e.Hdr.Name, ".wh.") || gone[e.Hdr.Name] {
				continue
			}
			k++
			if strings.HasPrefix(e.Hdr.Name, "app/src") || k%20 == 0 {
				out = append(out, e.Hdr.Name)
			}
		}
	}
	return out
}
