package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

// FuzzLoadReport: whatever distribution.json holds, loading it and
// rendering it never panics.
func FuzzLoadReport(f *testing.F) {
	rep := &Report{}
	rep.put(scenario(Default(), 1.01, 3, 4))
	good, err := json.Marshal(rep)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(good)
	f.Add([]byte(`{"scenarios":[{"nodes":-1,"runs":[{"loadavg_before":""}]}]}`))
	f.Add([]byte(`{"scenarios":null}`))
	f.Add([]byte(`[`))
	f.Fuzz(func(t *testing.T, data []byte) {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, reportName+".json"), data, 0o644); err != nil {
			t.Fatal(err)
		}
		r, err := loadReport(dir)
		if err != nil {
			return
		}
		_ = r.markdown()
		for i := range r.Scenarios {
			r.Scenarios[i].summarise()
		}
	})
}
