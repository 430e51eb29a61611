package proxy

import (
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUnixSendBuffer checks that connections accepted on the unix socket
// get the larger send buffer, as far as net.core.wmem_max allows (the
// kernel doubles what is asked, for its bookkeeping).
func TestUnixSendBuffer(t *testing.T) {
	raw, err := os.ReadFile("/proc/sys/net/core/wmem_max")
	if err != nil {
		t.Fatal(err)
	}
	wmemMax, err := strconv.Atoi(strings.TrimSpace(string(raw)))
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("unix", filepath.Join(t.TempDir(), "s"))
	if err != nil {
		t.Fatal(err)
	}
	bl := bufferedListener{ln}
	defer bl.Close()
	go func() {
		if c, err := net.Dial("unix", ln.Addr().String()); err == nil {
			defer c.Close()
			var b [1]byte
			c.Read(b[:])
		}
	}()
	c, err := bl.Accept()
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	rc, err := c.(*net.UnixConn).SyscallConn()
	if err != nil {
		t.Fatal(err)
	}
	var got int
	var gerr error
	if err := rc.Control(func(fd uintptr) { got, gerr = unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUF) }); err != nil || gerr != nil {
		t.Fatal(err, gerr)
	}
	if want := 2 * min(unixSendBuffer, wmemMax); got != want {
		t.Errorf("SO_SNDBUF %d, want %d (wmem_max %d)", got, want, wmemMax)
	}
}
