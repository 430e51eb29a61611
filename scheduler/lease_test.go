package scheduler

import (
	"testing"
	"time"
)

// A blob kept only by a lease is forgotten once the lease ends, whether
// the requester's next query or its report ends it (both record under
// the read lock, and forget the blob after).
func TestLeaseEndForgetsBlob(t *testing.T) {
	tests := []struct {
		name string
		end  func(t *testing.T, s *State) // ends r's lease on "x"
	}{
		{"query after timeout", func(t *testing.T, s *State) {
			mustParents(t, s, "r", digest("y"), []uint32{0}, at(s.cfg.LeaseTimeout))
		}},
		{"report", func(t *testing.T, s *State) {
			if _, err := s.Report("r", "h", Outcome{Blob: digest("x"), OK: true}, at(time.Second)); err != nil {
				t.Fatal(err)
			}
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newState(t, nil)
			mustRegister(t, s, "h", nil, t0)
			mustRegister(t, s, "r", nil, t0)
			mustAnnounce(t, s, "h", digest("x"), []uint32{0}, t0)
			mustAnnounce(t, s, "h", digest("y"), []uint32{0}, t0)
			mustParents(t, s, "r", digest("x"), []uint32{0}, t0)
			if _, err := s.Drop("h", digest("x"), []uint32{0}, t0); err != nil {
				t.Fatal(err)
			}
			if st := s.Stats(); st.Blobs != 2 || st.Leases != 1 {
				t.Fatalf("before: %+v, want 2 blobs (one kept by the lease) and 1 lease", st)
			}
			tt.end(t, s)
			if st := s.Stats(); st.Blobs != 1 {
				t.Errorf("after: %+v, want 1 blob", st)
			}
			if bs := s.Blobs(); len(bs) != 1 || bs[0].Blob != digest("y") {
				t.Errorf("blobs %+v, want y only", bs)
			}
		})
	}
}
