package harness

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// The names a Net gives what it makes. Every namespace is
// "dfly-ID-hub" or "dfly-ID-HOST", ID six random hex digits per Net, so
// that two runs side by side never meet; the hub holds the bridge and
// the hub-side veth ends, so no interface is ever made in the root
// namespace and deleting a Net's namespaces deletes all of it.
const (
	netPrefix  = "dfly-"
	netnsDir   = "/run/netns"
	netLockDir = "/run/damselfly-netns" // ID.lock, flocked while its Net lives
	bridgeName = "br0"
	hostIf     = "eth0" // the host's end of its link
	maxHosts   = 250
	netCmdWait = 10 * time.Second // bound on each ip or tc command
	netClose   = 30 * time.Second // bound on Close as a whole
)

var hostName = regexp.MustCompile(`^[a-z][a-z0-9]{0,11}$`)

// Link is a host's link to its Net: rates capped by the kernel (tc tbf
// on the egress of each veth end) and an optional one-way delay (tc
// netem, the same in each direction).
type Link struct {
	// Up caps what the host sends and Down what it receives, in bits/s;
	// 0 is uncapped (veth speed).
	Up, Down int64
	// Delay is added to every packet in each direction, so two hosts
	// with delays a and b see a round trip of 2(a+b).
	Delay time.Duration
}

// ErrNoNetem is AddHost's error for a Link with a Delay on a kernel
// without netem (sch_netem), such as a VM kernel built without modules.
var ErrNoNetem = errors.New("the kernel has no netem qdisc for link delays")

// Capped is a link capped at bps both ways.
func Capped(bps int64) Link { return Link{Up: bps, Down: bps} }

// Net is a private L2 segment of network namespaces: a bridge in a
// namespace of its own (the hub) and one namespace per host, joined to
// the bridge by a veth pair, with an address in 10.N.0.0/16 (N random
// per Net). The root namespace is not on the segment: hosts reach each
// other and nothing else, and their 127.0.0.1 is their own. It needs
// root and iproute2 (ip, tc) and util-linux's nsenter.
//
// Its methods are safe for concurrent use.
type Net struct {
	id     string // "dfly-3fa9c1"
	subnet byte   // the N of 10.N.0.0/16
	lock   *os.File

	mu     sync.Mutex
	made   []string // namespaces made (or being made), the hub first
	hosts  map[string]*Host
	closed bool
}

// NewNet sweeps what killed runs left behind (namespaces named as a
// Net names them whose Net's lock is free) and makes a new Net with
// its hub. Close deletes it.
func NewNet(ctx context.Context) (*Net, error) {
	if err := netUsable(); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(netLockDir, 0o755); err != nil {
		return nil, err
	}
	if err := sweepNets(ctx); err != nil {
		return nil, fmt.Errorf("sweep the namespaces of dead runs: %w", err)
	}
	var b [4]byte
	rand.Read(b[:])
	n := &Net{id: netPrefix + hex.EncodeToString(b[:3]), subnet: 16 + b[3]%224, hosts: map[string]*Host{}}
	// The lock file appears already locked (made under a temporary name,
	// locked, renamed), so a sweep never takes a live Net for a dead one.
	f, err := os.CreateTemp(netLockDir, "tmp-")
	if err != nil {
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, fmt.Errorf("lock %s: %w", f.Name(), err)
	}
	if err := os.Rename(f.Name(), n.lockPath()); err != nil {
		f.Close()
		os.Remove(f.Name())
		return nil, err
	}
	n.lock = f
	hub := n.id + "-hub"
	n.made = append(n.made, hub)
	err = runAll(ctx,
		[]string{"ip", "netns", "add", hub},
		[]string{"ip", "-n", hub, "link", "add", bridgeName, "type", "bridge"},
		[]string{"ip", "-n", hub, "link", "set", bridgeName, "up"})
	if err != nil {
		return nil, errors.Join(fmt.Errorf("make the hub of %s: %w", n.id, err), n.Close())
	}
	return n, nil
}

// netUsable says why a Net cannot be made here, or nil.
func netUsable() error {
	if os.Geteuid() != 0 {
		return errors.New("network namespaces need root")
	}
	for _, tool := range []string{"ip", "tc", "nsenter"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("network namespaces need %s (iproute2, util-linux): %w", tool, err)
		}
	}
	return nil
}

// ID is the prefix of every namespace the Net made, for logs.
func (n *Net) ID() string { return n.id }

func (n *Net) lockPath() string { return filepath.Join(netLockDir, n.id+".lock") }

// AddHost makes a host: namespace "ID-name" with lo up and eth0 on
// the segment, its link shaped as link says. Names are [a-z][a-z0-9]*,
// at most 12 characters, unique in the Net, and not "hub".
func (n *Net) AddHost(ctx context.Context, name string, link Link) (*Host, error) {
	if !hostName.MatchString(name) || name == "hub" {
		return nil, fmt.Errorf("host name %q: want [a-z][a-z0-9]{0,11}, not hub", name)
	}
	if link.Up < 0 || link.Down < 0 || link.Delay < 0 {
		return nil, fmt.Errorf("host %s: negative link %+v", name, link)
	}
	n.mu.Lock()
	switch {
	case n.closed:
		n.mu.Unlock()
		return nil, fmt.Errorf("host %s: net %s is closed", name, n.id)
	case n.hosts[name] != nil:
		n.mu.Unlock()
		return nil, fmt.Errorf("host %s: already in net %s", name, n.id)
	case len(n.hosts) >= maxHosts:
		n.mu.Unlock()
		return nil, fmt.Errorf("host %s: net %s is full (%d hosts)", name, n.id, maxHosts)
	}
	h := &Host{name: name, netns: n.id + "-" + name, link: link,
		addr: netip.AddrFrom4([4]byte{10, n.subnet, 0, byte(len(n.hosts) + 1)})}
	n.hosts[name] = h
	n.made = append(n.made, h.netns)
	n.mu.Unlock()

	hub, ns, peer := n.id+"-hub", h.netns, "h-"+name
	cmds := [][]string{
		{"ip", "netns", "add", ns},
		{"ip", "-n", hub, "link", "add", peer, "type", "veth", "peer", "name", hostIf, "netns", ns},
		{"ip", "-n", ns, "addr", "add", h.addr.String() + "/16", "dev", hostIf},
		{"ip", "-n", ns, "link", "set", "lo", "up"},
		{"ip", "-n", ns, "link", "set", hostIf, "up"},
		{"ip", "-n", hub, "link", "set", peer, "master", bridgeName, "up"},
	}
	cmds = append(cmds, shape(ns, hostIf, link.Up, link.Delay)...)
	cmds = append(cmds, shape(hub, peer, link.Down, link.Delay)...)
	if err := runAll(ctx, cmds...); err != nil {
		// The namespace stays in made: Close deletes it, and the veth
		// pair (if any) with it.
		if link.Delay > 0 && strings.Contains(err.Error(), "netem") && strings.Contains(err.Error(), "kind is unknown") {
			err = fmt.Errorf("%w: %w", ErrNoNetem, err)
		}
		return nil, fmt.Errorf("add host %s to %s: %w", name, n.id, err)
	}
	return h, nil
}

// shape is the tc commands that cap the egress of dev in namespace ns
// at bps (0: no cap) after delay (0: none).
func shape(ns, dev string, bps int64, delay time.Duration) [][]string {
	tc := []string{"tc", "-n", ns, "qdisc", "add", "dev", dev}
	var cmds [][]string
	tbfParent := []string{"root", "handle", "1:"}
	if delay > 0 {
		cmds = append(cmds, append(slices.Clone(tc), "root", "handle", "1:", "netem",
			"delay", strconv.FormatInt(delay.Microseconds(), 10)+"us", "limit", "100000"))
		tbfParent = []string{"parent", "1:1", "handle", "10:"}
	}
	if bps > 0 {
		// Burst: 10 ms at the rate, at least a few full frames (tbf splits
		// larger GSO packets); queue: 50 ms at the rate, beyond which
		// packets drop as at a real bottleneck.
		burst := max(bps/8/100, 16<<10)
		args := append(slices.Clone(tc), tbfParent...)
		args = append(args, "tbf", "rate", strconv.FormatInt(bps, 10)+"bit",
			"burst", strconv.FormatInt(burst, 10), "latency", "50ms")
		cmds = append(cmds, args)
	}
	return cmds
}

// Host is the host of that name, or nil.
func (n *Net) Host(name string) *Host {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.hosts[name]
}

// Close kills any process still in the Net's namespaces (stop your
// Procs first: one found is reported as an error), deletes the
// namespaces, and with them the bridge and every veth, and releases the
// Net's lock. It is bounded in time and idempotent; it is safe to call
// after a failed NewNet or AddHost.
func (n *Net) Close() error {
	n.mu.Lock()
	if n.closed {
		n.mu.Unlock()
		return nil
	}
	n.closed = true
	made := n.made
	for _, h := range n.hosts {
		h.closeIdle()
	}
	n.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), netClose)
	defer cancel()
	var errs []error
	// Hosts first, then the hub, the reverse of making.
	for i := len(made) - 1; i >= 0; i-- {
		if pids := killNetns(ctx, made[i]); len(pids) > 0 {
			errs = append(errs, fmt.Errorf("processes left in %s, killed: %v", made[i], pids))
		}
		if err := deleteNetns(ctx, made[i]); err != nil {
			errs = append(errs, err)
		}
	}
	if n.lock != nil {
		os.Remove(n.lockPath())
		n.lock.Close()
	}
	return errors.Join(errs...)
}
