package scheduler

import (
	"fmt"
	"math"
	"slices"
	"testing"
)

func TestPick(t *testing.T) {
	tests := []struct {
		name       string
		schedulers []string
	}{
		{"two", []string{"s1", "s2"}},
		{"three", []string{"s1", "s2", "s3"}},
		{"five", []string{"a:7070", "b:7070", "c:7070", "d:7070", "e:7070"}},
	}
	const blobs = 6000
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			owner := make([]string, blobs)
			count := map[string]int{}
			for i := range blobs {
				d := digest(fmt.Sprint(i))
				owner[i] = Pick(d, tt.schedulers)
				count[owner[i]]++
				// Order does not matter.
				if rev := slices.Clone(tt.schedulers); Pick(d, append(rev[1:], rev[0])) != owner[i] {
					t.Fatalf("blob %d: owner depends on order", i)
				}
			}
			mean := float64(blobs) / float64(len(tt.schedulers))
			for s, n := range count {
				if math.Abs(float64(n)-mean) > 0.1*mean {
					t.Errorf("%s owns %d of %d, mean %.0f", s, n, blobs, mean)
				}
			}
			// Remove each scheduler in turn: only its blobs move.
			for _, gone := range tt.schedulers {
				rest := slices.DeleteFunc(slices.Clone(tt.schedulers), func(s string) bool { return s == gone })
				moved := 0
				for i := range blobs {
					now := Pick(digest(fmt.Sprint(i)), rest)
					switch {
					case owner[i] == gone:
						moved++
						if now == gone {
							t.Fatal("removed scheduler still picked")
						}
					case now != owner[i]:
						t.Fatalf("blob %d moved from %s to %s when %s left", i, owner[i], now, gone)
					}
				}
				if moved != count[gone] {
					t.Fatalf("%d moved, %s owned %d", moved, gone, count[gone])
				}
			}
		})
	}
}

func TestPickEdgeCases(t *testing.T) {
	d := digest("x")
	if got := Pick(d, nil); got != "" {
		t.Fatalf("empty list: %q", got)
	}
	if got := Pick(d, []string{"only"}); got != "only" {
		t.Fatalf("one scheduler: %q", got)
	}
	if Pick(d, []string{"a", "b", "a"}) != Pick(d, []string{"b", "a"}) {
		t.Fatal("duplicates change the pick")
	}
}
