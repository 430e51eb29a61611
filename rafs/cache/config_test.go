package cache

import (
	"math"
	"strings"
	"testing"
)

func TestConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  Config
		want []string // substrings of the error; none means valid
	}{
		{"unlimited, no watermarks", Config{Dir: "/d"}, nil},
		{"Default", Default("/d"), nil},
		{"explicit", Config{Dir: "/d", Capacity: 1 << 30, HighWatermark: 1, LowWatermark: 0.5}, nil},
		{"no dir", Config{}, []string{"dir:"}},
		{"negative capacity", Config{Dir: "/d", Capacity: -1}, []string{"capacity:"}},
		{"high above 1", Config{Dir: "/d", HighWatermark: 1.5}, []string{"high_watermark:"}},
		{"high NaN", Config{Dir: "/d", HighWatermark: math.NaN()}, []string{"high_watermark:"}},
		{"low negative", Config{Dir: "/d", LowWatermark: -0.1}, []string{"low_watermark:"}},
		{"low above high", Config{Dir: "/d", HighWatermark: 0.5, LowWatermark: 0.6}, []string{"low_watermark: 0.6 is not below"}},
		{"low above default high", func() Config { c := Default("/d"); c.LowWatermark = 0.96; return c }(), []string{"low_watermark:"}},
		{"capacity without watermarks", Config{Dir: "/d", Capacity: 1 << 30}, []string{"high_watermark:", "low_watermark:"}},
		{"everything", Config{Capacity: -5, HighWatermark: 2, LowWatermark: 1},
			[]string{"dir:", "capacity:", "high_watermark:", "low_watermark:"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.want) == 0 {
				if err != nil {
					t.Fatalf("got %v, want nil", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("got nil, want an error naming %q", tt.want)
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("got %q, want it to contain %q", err, w)
				}
			}
		})
	}
}

func TestOpenRejectsInvalidConfig(t *testing.T) {
	t.Parallel()
	if _, err := Open(Config{Dir: t.TempDir(), Capacity: -1}); err == nil {
		t.Fatal("got nil, want an error")
	}
}
