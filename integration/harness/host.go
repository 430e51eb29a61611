package harness

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
	"time"

	"golang.org/x/sys/unix"
)

// Host is one network namespace on a Net: what a node of a deployment
// sees as its machine. Processes join it through ProcConfig.Netns (or
// Command); the harness's own code dials and listens in it with
// DialContext, Listen and HTTPClient. A Host's methods are safe for
// concurrent use.
type Host struct {
	name  string
	netns string
	addr  netip.Addr
	link  Link

	once      sync.Once
	transport *http.Transport // HTTPClient's, made on first use
}

// Name is the name the host was added with.
func (h *Host) Name() string { return h.name }

// Netns is the namespace's name, as `ip netns` lists it; pass it as
// ProcConfig.Netns.
func (h *Host) Netns() string { return h.netns }

// Addr is the host's address on its Net.
func (h *Host) Addr() netip.Addr { return h.addr }

// Link is the link the host was added with.
func (h *Host) Link() Link { return h.link }

// HostPort is "ADDR:port", an address to listen on or dial.
func (h *Host) HostPort(port int) string {
	return netip.AddrPortFrom(h.addr, uint16(port)).String()
}

// Command is exec.CommandContext for a program run in the host's
// namespace: `nsenter --net=... -- path args...`. nsenter joins the
// network namespace only (not the mount namespace, unlike `ip netns
// exec`, so FUSE mounts made inside are seen outside) and execs the
// program in place, so the command's pid is the program's.
func (h *Host) Command(ctx context.Context, path string, args ...string) *exec.Cmd {
	return exec.CommandContext(ctx, "nsenter", nsenterArgs(h.netns, path, args)...)
}

func nsenterArgs(netns, path string, args []string) []string {
	return append([]string{"--net=" + filepath.Join(netnsDir, netns), "--", path}, args...)
}

// Run runs a program in the host's namespace for at most timeout and
// returns its combined output; an error carries the output.
func (h *Host) Run(ctx context.Context, timeout time.Duration, path string, args ...string) ([]byte, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := h.Command(ctx, path, args...)
	cmd.WaitDelay = time.Second
	out, err := cmd.CombinedOutput()
	if err != nil {
		return out, fmt.Errorf("%s: %s: %w: %s", h.name, path, err, lastLines(out, 5))
	}
	return out, nil
}

// DialContext dials addr from the host's namespace. addr must be an IP
// literal with a port: nothing resolves names on a Net. The connection
// is the harness process's own, and its packets cross the host's link.
func (h *Host) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	var c net.Conn
	err := h.inNetns(func() error {
		var err error
		c, err = (&net.Dialer{}).DialContext(ctx, network, addr)
		return err
	})
	return c, err
}

// Listen listens on addr in the host's namespace (":0" or
// h.HostPort(0) for a free port).
func (h *Host) Listen(network, addr string) (net.Listener, error) {
	var l net.Listener
	err := h.inNetns(func() error {
		var err error
		l, err = net.Listen(network, addr)
		return err
	})
	return l, err
}

// HTTPClient is a client whose connections are dialled from the host.
// Its clients share one transport per host, whose idle connections
// Net.Close closes.
func (h *Host) HTTPClient() *http.Client {
	h.once.Do(func() {
		h.transport = &http.Transport{DialContext: h.DialContext, ResponseHeaderTimeout: 30 * time.Second}
	})
	return &http.Client{Transport: h.transport}
}

// closeIdle closes the idle connections of HTTPClient's transport.
func (h *Host) closeIdle() {
	h.once.Do(func() {})
	if h.transport != nil {
		h.transport.CloseIdleConnections()
	}
}

// inNetns runs fn on an OS thread switched into the host's namespace.
// A socket belongs to the namespace its creating thread was in, and Go
// creates (and connects) a socket on the goroutine that asks, so
// sockets fn makes are the host's for their whole life. The thread is
// switched back afterwards; if that fails, the goroutine ends still
// locked and the runtime discards the thread.
func (h *Host) inNetns(fn func() error) error {
	errc := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		self, err := os.Open(fmt.Sprintf("/proc/self/task/%d/ns/net", unix.Gettid()))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- err
			return
		}
		defer self.Close()
		target, err := os.Open(filepath.Join(netnsDir, h.netns))
		if err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("host %s: %w", h.name, err)
			return
		}
		defer target.Close()
		if err := unix.Setns(int(target.Fd()), unix.CLONE_NEWNET); err != nil {
			runtime.UnlockOSThread()
			errc <- fmt.Errorf("enter %s: %w", h.netns, err)
			return
		}
		err = fn()
		if unix.Setns(int(self.Fd()), unix.CLONE_NEWNET) == nil {
			runtime.UnlockOSThread()
		}
		errc <- err
	}()
	return <-errc
}
