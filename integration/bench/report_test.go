package bench

import (
	"strings"
	"testing"

	"damselfly/rafs"
	"damselfly/rafs/convert"
)

func TestImageRows(t *testing.T) {
	ir := &ImageResult{
		Name: "img",
		Convert: &convert.Result{SourceLayers: 1000, NewBlobBytes: 800, BootstrapBytes: 100, BootstrapLayer: 40,
			Stats: rafs.BuildStats{ContentBytes: 300e6, Files: 8, Dirs: 2, NewChunks: 5}},
		EStargz:      &EStargzResult{OutputBytes: 900},
		Damselfly:    []Sample{{Seconds: 1, MaxRSS: 100 << 20}, {Seconds: 3, MaxRSS: 300 << 20}, {Seconds: 2, MaxRSS: 200 << 20}},
		Baseline:     []Sample{{Seconds: 10, MaxRSS: 50 << 20}},
		RSSTarget:    true,
		DamselflyCmd: "d", EStargzCmd: "e",
	}
	rows := imageRows(ir)
	byWhat := map[string]Row{}
	for _, r := range rows {
		byWhat[strings.TrimPrefix(r.What, "img (286.1 MiB content, 1000 B gzip): ")] = r
	}
	check := func(what string, wantVal float64, wantMet *bool) {
		t.Helper()
		r, ok := byWhat[what]
		if !ok {
			t.Fatalf("no row %q in %v", what, rows)
		}
		if r.Damselfly != wantVal {
			t.Errorf("%s: got %v, want %v", what, r.Damselfly, wantVal)
		}
		if (r.Met == nil) != (wantMet == nil) || r.Met != nil && *r.Met != *wantMet {
			t.Errorf("%s: got met %v, want %v", what, r.Met, wantMet)
		}
	}
	check("convert throughput", 150, met(true)) // 300 MB in the median 2 s
	check("convert time", 2, met(true))         // 10 s / 2 s = 5x
	check("peak RSS", 200, met(true))
	check("RAFS blobs vs source gzip layers", 800, met(true))
	check("output (blobs + bootstrap layer) vs eStargz layers", 840, met(true))
	check("bootstrap bytes per file and per chunk", 100, nil)

	md := (&Report{Rows: rows}).Markdown()
	if !strings.Contains(md, "| what | damselfly | baseline |") || strings.Contains(md, "**no**") {
		t.Errorf("unexpected table:\n%s", md)
	}
	ir.Damselfly = []Sample{{Seconds: 4, MaxRSS: 300 << 20}}
	md = (&Report{Rows: imageRows(ir)}).Markdown()
	if strings.Count(md, "**no**") != 2 { // throughput 75 MB/s and RSS 300 MiB
		t.Errorf("got %d misses, want 2:\n%s", strings.Count(md, "**no**"), md)
	}
}
