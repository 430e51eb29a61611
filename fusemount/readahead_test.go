package fusemount

import (
	"strings"
	"testing"
)

func TestMountDevice(t *testing.T) {
	t.Parallel()
	info := `22 1 0:21 / /proc rw,nosuid - proc proc rw
101 22 0:63 / /mnt/a\040b rw,relatime - fuse.damselfly damselfly:x ro
102 22 0:64 / /mnt/img rw,relatime - fuse.damselfly damselfly:y ro
103 22 0:65 / /mnt/img rw,relatime - fuse.damselfly damselfly:z ro
`
	for _, tc := range []struct{ mp, want string }{
		{"/mnt/a b", "0:63"},
		{"/mnt/img/", "0:65"}, // the last mount on top
		{"/mnt/none", ""},
	} {
		got, err := mountDevice(strings.NewReader(info), tc.mp)
		if got != tc.want || (err != nil) != (tc.want == "") {
			t.Errorf("mountDevice(%q): got %q, %v; want %q", tc.mp, got, err, tc.want)
		}
	}
}
