package chunkapi

import "testing"

func TestSocketPath(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		in      string
		path    string
		isUnix  bool
		wantErr bool
	}{
		{"http://127.0.0.1:7950", "", false, false},
		{"https://peer.local", "", false, false},
		{"unix:///run/damselfly/peer.sock", "/run/damselfly/peer.sock", true, false},
		{"unix:/run/damselfly/peer.sock", "/run/damselfly/peer.sock", true, false},
		{"unix://host/run/peer.sock", "", true, true},
		{"unix:relative.sock", "", true, true},
		{"unix:///run/peer.sock?x=1", "", true, true},
		{"unix:///run/peer.sock#f", "", true, true},
		{"unix://", "", true, true},
	} {
		path, isUnix, err := SocketPath(tc.in)
		if path != tc.path || isUnix != tc.isUnix || (err != nil) != tc.wantErr {
			t.Errorf("chunkapi.SocketPath(%q) = %q, %v, %v; want %q, %v, error %v", tc.in, path, isUnix, err, tc.path, tc.isUnix, tc.wantErr)
		}
	}
}
