package host

import (
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// rcmgrSeries renders every libp2p_rcmgr_* sample reg gathers, sorted.
// The gauges are process-wide (libp2p keeps them in package variables),
// so a test compares them before and after its own traffic.
func rcmgrSeries(t *testing.T, reg *prometheus.Registry) string {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var lines []string
	for _, mf := range mfs {
		if !strings.HasPrefix(mf.GetName(), "libp2p_rcmgr_") {
			continue
		}
		for _, m := range mf.GetMetric() {
			lines = append(lines, fmt.Sprintf("%s %v %v %v", mf.GetName(), m.GetLabel(), m.GetGauge().GetValue(), m.GetHistogram().GetSampleCount()))
		}
	}
	slices.Sort(lines)
	return strings.Join(lines, "\n")
}

// TestResourceMetrics checks that the resource manager's gauges stay
// untouched by default, even with a Registerer, and move when
// ResourceMetrics asks for them. Not parallel: the gauges are shared by
// every host in the process.
func TestResourceMetrics(t *testing.T) {
	for _, on := range []bool{false, true} {
		t.Run(fmt.Sprintf("on=%v", on), func(t *testing.T) {
			dir := t.TempDir()
			key := writeKey(t, dir, "cluster.key")
			reg := prometheus.NewRegistry()
			ca, cb := testConfig(filepath.Join(dir, "a"), key), testConfig(filepath.Join(dir, "b"), key)
			ca.Registerer, cb.Registerer = reg, reg
			ca.ResourceMetrics, cb.ResourceMetrics = on, on
			a := startHost(t, ca)
			before := rcmgrSeries(t, reg)
			b := startHost(t, cb)
			echoOnce(t, a, b, "ping")
			after := rcmgrSeries(t, reg)
			if changed := before != after; changed != on {
				t.Fatalf("resource metrics %v: gauges changed %v\nbefore:\n%s\nafter:\n%s", on, changed, before, after)
			}
		})
	}
}
