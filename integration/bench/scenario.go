package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime/pprof"

	"damselfly/rafs/convert"
	"damselfly/rafs/transport"
)

// DedupResult is the chunk-dictionary scenario on one image pair: v1
// converted alone, then v2 converted with v1 as its chunk dictionary.
type DedupResult struct {
	Name         string          `json:"name"`
	V1Tag        string          `json:"v1"`
	V2Tag        string          `json:"v2"`
	V1, V2       *convert.Result `json:"-"`
	V1Convert    json.RawMessage `json:"v1_convert"`
	V2Convert    json.RawMessage `json:"v2_convert"`
	V2Inspect    json.RawMessage `json:"v2_inspect"`
	Check        DedupCheck      `json:"check"`
	ContentBytes uint64          `json:"content_bytes"` // both images
	RawBytes     uint64          `json:"raw_bytes"`     // uncompressed bytes of the chunks both store
	DedupRatio   float64         `json:"dedup_ratio"`   // ContentBytes / RawBytes
	Stored       int64           `json:"stored_bytes"`  // new blobs and bootstrap layers of both
	GzipDistinct int64           `json:"gzip_distinct_bytes"`
	GzipSum      int64           `json:"gzip_sum_bytes"`
	Command      string          `json:"command"`
	// ConvertError is set when `damselfly convert --chunk-dict` failed and
	// v2 was built in process with rafs.Build instead.
	ConvertError string `json:"convert_error,omitempty"`
}

// runDedup converts v1, then v2 with v1 as chunk dictionary, into one
// layout, and checks v2's new blobs through the bootstraps.
func runDedup(ctx context.Context, p Progress, name, layout, v1, v2, damselfly, out string, rel func(string) string) (*DedupResult, error) {
	dst := filepath.Join(out, "dedup", name)
	if err := os.RemoveAll(dst); err != nil {
		return nil, err
	}
	r := &DedupResult{Name: name, V1Tag: v1, V2Tag: v2}
	d1 := "oci:" + dst + ":" + v1 + "-rafs"
	d2 := "oci:" + dst + ":" + v2 + "-rafs"
	src1, src2 := "oci:"+layout+":"+v1, "oci:"+layout+":"+v2
	bin := rel(damselfly)
	r.Command = fmt.Sprintf("%s convert oci:%s:%s oci:/tmp/dd:%s-rafs && %s convert oci:%s:%s oci:/tmp/dd:%s-rafs --chunk-dict oci:/tmp/dd:%s-rafs && %s inspect oci:/tmp/dd:%s-rafs --json",
		bin, rel(layout), v1, v1, bin, rel(layout), v2, v2, v1, bin, v2)
	p.Printf("dedup %s: converting %s, then %s with --chunk-dict", name, v1, v2)
	var err error
	if r.V1, r.V1Convert, err = convertJSON(ctx, damselfly, src1, d1); err != nil {
		return nil, err
	}
	if r.V2, r.V2Convert, err = convertJSON(ctx, damselfly, src2, d2, "--chunk-dict", d1); err != nil {
		// Keep measuring what the builder stores; the table says how.
		r.ConvertError = err.Error()
		p.Printf("dedup %s: damselfly convert --chunk-dict FAILED: %v", name, err)
		p.Printf("dedup %s: building %s in process with rafs.Build and the same dictionary instead", name, v2)
		if r.V2, d2, err = buildWithDict(ctx, src2, d1, filepath.Join(dst, v2+"-inprocess")); err != nil {
			return nil, err
		}
		r.V2Convert, _ = json.Marshal(r.V2)
	}
	if _, r.V2Inspect, err = (Meter{}).Measure(ctx, []string{damselfly, "inspect", d2, "--json"}); err != nil {
		return nil, err
	}
	if r.Check, err = CheckDedup(ctx, d1, d2); err != nil {
		return nil, err
	}
	r.ContentBytes = r.V1.Stats.ContentBytes + r.V2.Stats.ContentBytes
	r.RawBytes = r.V1.Stats.RawBytes + r.V2.Stats.RawBytes
	if r.RawBytes > 0 {
		r.DedupRatio = float64(r.ContentBytes) / float64(r.RawBytes)
	}
	r.Stored = r.V1.NewBlobBytes + r.V1.BootstrapLayer + r.V2.NewBlobBytes + r.V2.BootstrapLayer
	if r.GzipDistinct, r.GzipSum, err = gzipLayers(ctx, src1, src2); err != nil {
		return nil, err
	}
	p.Printf("dedup %s: %s reuses %d of %d chunks; new blobs hold %d chunks, %d unique to %s, %d duplicates",
		name, v2, r.Check.Shared, r.Check.Chunks, r.Check.NewBlobChunks, r.Check.Unique, v2, r.Check.Duplicates)
	return r, nil
}

func convertJSON(ctx context.Context, damselfly, src, dst string, extra ...string) (*convert.Result, json.RawMessage, error) {
	argv := append([]string{damselfly, "convert", src, dst, "--json"}, extra...)
	_, out, err := (Meter{}).Measure(ctx, argv)
	if err != nil {
		return nil, nil, err
	}
	var res convert.Result
	if err := json.Unmarshal(out, &res); err != nil {
		return nil, nil, fmt.Errorf("%s: %w", src, err)
	}
	return &res, out, nil
}

// gzipLayers sums the source layers of refs: distinct blobs (as a
// registry stores them) and every layer of every image.
func gzipLayers(ctx context.Context, refs ...string) (distinct, sum int64, err error) {
	seen := map[string]bool{}
	for _, s := range refs {
		ref, err := transport.Parse(s, transport.Options{})
		if err != nil {
			return 0, 0, err
		}
		img, err := transport.ReadImage(ctx, ref, transport.Options{})
		if err != nil {
			return 0, 0, err
		}
		m, err := img.Manifest()
		if err != nil {
			return 0, 0, err
		}
		for _, l := range m.Layers {
			sum += l.Size
			if !seen[l.Digest.String()] {
				seen[l.Digest.String()] = true
				distinct += l.Size
			}
		}
	}
	return distinct, sum, nil
}

// ProfileConvert converts src in process under the CPU profiler, writing
// the profile to prof and the RAFS image under work (removed after).
func ProfileConvert(ctx context.Context, src, work, prof string) error {
	if err := os.MkdirAll(work, 0o755); err != nil {
		return err
	}
	defer os.RemoveAll(work)
	f, err := os.Create(prof)
	if err != nil {
		return err
	}
	defer f.Close()
	if err := pprof.StartCPUProfile(f); err != nil {
		return err
	}
	_, err = convert.Convert(ctx, src, "oci:"+filepath.Join(work, "rafs")+":rafs", convert.Options{WorkDir: work})
	pprof.StopCPUProfile()
	if err != nil {
		return err
	}
	return f.Close()
}
