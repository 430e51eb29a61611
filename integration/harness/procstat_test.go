package harness

import (
	"os"
	"testing"
)

func TestParseStat(t *testing.T) {
	t.Parallel()
	// A real line (trimmed after cstime) and one whose command name
	// holds ") " as a hostile process can choose.
	tests := []struct {
		name, line string
		want       ProcCPU
		wantErr    bool
	}{
		{"plain", "4242 (damselfly) S 1 4242 4242 0 -1 4194560 2049 0 0 0 1234 567 89 10 20 0 12 0",
			ProcCPU{User: 12.34, Sys: 5.67, ChildUser: 0.89, ChildSys: 0.10}, false},
		{"parens in name", "7 (a) b) (c) R 1 7 7 0 -1 0 0 0 0 0 100 200 300 400 20 0 1 0",
			ProcCPU{User: 1, Sys: 2, ChildUser: 3, ChildSys: 4}, false},
		{"short", "7 (x) R 1 2 3", ProcCPU{}, true},
		{"no name", "7 x R 1", ProcCPU{}, true},
		{"not a number", "7 (x) R 1 7 7 0 -1 0 0 0 0 0 x 200 300 400", ProcCPU{}, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := ParseStat(tt.line)
			if (err != nil) != tt.wantErr {
				t.Fatalf("err = %v, want error %t", err, tt.wantErr)
			}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
		})
	}
}

func TestReadProcCPUSelf(t *testing.T) {
	t.Parallel()
	c, err := ReadProcCPU(os.Getpid())
	if err != nil {
		t.Fatal(err)
	}
	if c.Total() < 0 {
		t.Errorf("got %+v, want non-negative times", c)
	}
}
