package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"damselfly/fusemount"
	"damselfly/integration/harness"
	"damselfly/peer/host"
	"damselfly/rafs/rafstest"
)

// cluster is a registry, a scheduler and nodes, all real processes.
type cluster struct {
	t     *testing.T
	dir   string
	reg   *registry
	key   string // the cluster key file every daemon uses
	sched *scheduler
	nodes []*node
}

// newCluster starts a registry and a scheduler. It needs root and FUSE
// (the nodes mount), docker-registry and umoci.
func newCluster(t *testing.T) *cluster {
	t.Helper()
	return newClusterWith(t, "")
}

// newClusterWith is newCluster with state, more lines of the scheduler's
// advanced.state section (YAML, indented by two spaces).
func newClusterWith(t *testing.T, state string) *cluster {
	t.Helper()
	return newClusterOf(t, state, false)
}

// newClusterOf is newClusterWith, keeping the registry's access log if
// accessLog is set.
func newClusterOf(t *testing.T, state string, accessLog bool) *cluster {
	t.Helper()
	rafstest.RequireRoot(t)
	if _, err := os.Stat("/dev/fuse"); err != nil {
		rafstest.SkipOrFail(t, "needs /dev/fuse")
	}
	rafstest.RequireTool(t, "umoci")
	c := &cluster{t: t, dir: t.TempDir()}
	c.reg = startRegistryLogged(t, accessLog)
	c.key = filepath.Join(c.dir, "cluster.key")
	if err := host.CreateClusterKeyFile(c.key); err != nil {
		t.Fatal(err)
	}
	c.sched = c.startScheduler(state)
	return c
}

// scheduler is the scheduler process. It listens on a fixed port picked
// at the start, so that a restart comes back at the address peers know.
type scheduler struct {
	c      *cluster
	config string
	p      *proc
	addr   string // multiaddr with /p2p/ID
	admin  string // admin API base URL
	n      int
}

func (c *cluster) startScheduler(state string) *scheduler {
	c.t.Helper()
	dir := filepath.Join(c.dir, "scheduler")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		c.t.Fatal(err)
	}
	s := &scheduler{c: c, config: filepath.Join(dir, "scheduler.yaml")}
	cfg := fmt.Sprintf(`host:
  identity_file: %s
  listen_addrs: ["/ip4/127.0.0.1/tcp/%d"]
  cluster_key_file: %s
admin:
  listen: 127.0.0.1:0
advanced:
  state:
    peer_ttl: 3s
    ban_quorum: 1
    origin_timeout: 5s
    wait_retry: 200ms
%s  expire_interval: 200ms
`, filepath.Join(dir, "identity.key"), freePort(c.t), c.key, indent(state))
	if err := os.WriteFile(s.config, []byte(cfg), 0o600); err != nil {
		c.t.Fatal(err)
	}
	s.start()
	return s
}

func (s *scheduler) start() {
	s.c.t.Helper()
	s.n++
	s.p = start(s.c.t, fmt.Sprintf("scheduler-%d", s.n), "--config", s.config, "--dir", filepath.Dir(s.config), "scheduler")
	s.addr = s.p.waitLine("listening ", 30*time.Second)
	s.admin = s.p.waitLine("admin ", 10*time.Second)
}

// restart kills the scheduler (no clean shutdown) and starts it again
// with empty state at the same address.
func (s *scheduler) restart() {
	s.p.kill()
	s.start()
}

// bans lists the peer IDs the scheduler has banned.
func (s *scheduler) bans() []string {
	s.c.t.Helper()
	var views []struct {
		Peer string `json:"peer"`
	}
	getJSON(s.c.t, s.admin+"/api/v1/bans", &views)
	var ids []string
	for _, v := range views {
		ids = append(ids, v.Peer)
	}
	return ids
}

func getJSON(t testing.TB, url string, v any) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
}

func freePort(t testing.TB) int {
	t.Helper()
	port, err := harness.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// node is one machine: a peer daemon with its state and node cache, and
// a gate to the registry through which everything on it reaches the
// registry.
type node struct {
	c     *cluster
	name  string
	dir   string
	cache string
	gate  *gate
	p     *proc
	proxy string // the peer's proxy base URL
	id    string // the peer's libp2p ID
	extra string // more of the peer's advanced: section (YAML), for a scenario
	// capacity is the node cache's capacity in bytes, for the peer and
	// the mounts alike; 0 is unlimited.
	capacity int64
}

// addNode starts a node's peer daemon; extra is appended to its
// configuration file.
func (c *cluster) addNode(name, extra string) *node {
	c.t.Helper()
	return c.addNodeWithCache(name, extra, 0)
}

// addNodeWithCache is addNode with a node cache of capacity bytes.
func (c *cluster) addNodeWithCache(name, extra string, capacity int64) *node {
	c.t.Helper()
	n := &node{c: c, name: name, dir: filepath.Join(c.dir, name), extra: extra, capacity: capacity}
	n.cache = filepath.Join(n.dir, "cache")
	n.gate = startGate(c.t, c.reg.host)
	n.startPeer()
	c.nodes = append(c.nodes, n)
	return n
}

func (n *node) startPeer() {
	n.c.t.Helper()
	cfg := fmt.Sprintf(`dir: %s
host:
  listen_addrs: ["/ip4/127.0.0.1/tcp/0"]
  cluster_key_file: %s
cache:
  dir: %s
  capacity: %d
proxy:
  listen: 127.0.0.1:0
registry:
  default_registry: http://%s
scheduler:
  schedulers: ["%s"]
labels:
  host: %s
advanced:
  registry:
    retry_limit: 1
  scheduler:
    heartbeat_interval: 250ms
    request_timeout: 1s
  node:
    fetch_deadline: 6s
    route_timeout: 1s
    parent_timeout: 5s
    holdings_check_interval: 500ms
%s`, n.dir, n.c.key, n.cache, n.capacity, n.gate.host, n.c.sched.addr, n.name, indent(n.extra))
	file := filepath.Join(n.c.dir, n.name+"-peer.yaml")
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		n.c.t.Fatal(err)
	}
	n.p = start(n.c.t, n.name+"-peer", "--config", file, "peer")
	addr := n.p.waitLine("listening ", 30*time.Second)
	n.id = addr[strings.LastIndex(addr, "/")+1:]
	n.proxy = n.p.waitLine("proxy ", 10*time.Second)
}

// mount is a mount daemon process of a node.
type mount struct {
	n   *node
	dir string
	p   *proc
}

// mount starts `damselfly mount` of im on the node, through its peer,
// and waits until the filesystem answers. Its backend's deadline is 8s;
// extra is appended to the mount configuration (an advanced: section
// in it joins the harness's).
func (n *node) mount(im *image, extra string) *mount {
	n.c.t.Helper()
	return n.mountDeadline(im, "8s", extra)
}

// mountDeadline is mount with the backend's deadline (a duration, or ""
// for the default).
func (n *node) mountDeadline(im *image, deadline, extra string) *mount {
	n.c.t.Helper()
	return n.mountRef(im.ref(n.gate.host, "rafs"), deadline, extra)
}

// mountRef is mountDeadline of the image reference ref (docker://...).
func (n *node) mountRef(ref, deadline, extra string) *mount {
	n.c.t.Helper()
	// extra's own advanced: lines join the harness's.
	adv := ""
	if rest, ok := strings.CutPrefix(extra, "advanced:\n"); ok {
		adv, extra = rest, ""
	}
	dl := ""
	if deadline != "" {
		dl = "\n    deadline: " + deadline
	}
	m := &mount{n: n, dir: filepath.Join(n.dir, fmt.Sprintf("mnt-%d", time.Now().UnixNano()))}
	if err := os.MkdirAll(m.dir, 0o755); err != nil {
		n.c.t.Fatal(err)
	}
	cfg := fmt.Sprintf(`backend:
  type: registry
  proxy:
    url: %s
    fallback: true
cache:
  dir: %s
  capacity: %d
prefetch:
  enable: false
%s
advanced:
  backend:
    retry_limit: 2%s
    proxy:
      ping_url: %s/healthz
      check_interval: 500ms
%s`, n.proxy, n.cache, n.capacity, extra, dl, n.proxy, adv)
	file := m.dir + ".yaml"
	if err := os.WriteFile(file, []byte(cfg), 0o600); err != nil {
		n.c.t.Fatal(err)
	}
	m.p = start(n.c.t, n.name+"-mount", "--config", file, "mount", ref, m.dir)
	if err := harness.WaitMounted(n.c.t.Context(), m.p.Proc, m.dir, 30*time.Second); err != nil {
		n.c.t.Fatal(err)
	}
	n.c.t.Cleanup(m.unmount)
	return m
}

// unmount unmounts and waits for the daemon to exit, which it must do on
// its own when its mountpoint goes.
func (m *mount) unmount() {
	if m.p.exited() {
		syscall.Unmount(m.dir, syscall.MNT_DETACH)
		return
	}
	if err := harness.Unmount(m.p.Proc, m.dir); err != nil {
		m.n.c.t.Errorf("mount daemon of %s: %v", m.n.name, err)
	}
}

// status asks the mount daemon for its counters.
func (m *mount) status() *fusemount.Status {
	m.n.c.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	st, err := fusemount.QueryStatus(ctx, m.dir, "")
	if err != nil {
		m.n.c.t.Fatalf("status of %s: %v", m.dir, err)
	}
	return st
}

// indent indents YAML lines by two spaces, to put them in a section.
func indent(yaml string) string {
	if yaml == "" {
		return ""
	}
	return "  " + strings.ReplaceAll(strings.TrimSuffix(yaml, "\n"), "\n", "\n  ") + "\n"
}
