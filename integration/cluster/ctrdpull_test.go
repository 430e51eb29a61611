package cluster

import (
	"bufio"
	"io"
	"os"
	"regexp"
	"strconv"
	"sync"
	"testing"
	"time"
)

// Scenario (issue 21, item 5): real containerd daemons pull through the
// node's mirror with configs/containerd/hosts.toml as shipped. Three
// nodes, each with its own containerd (own root, state and socket; ctr
// pulls with --hosts-dir of a directory holding the shipped hosts.toml,
// its server the registry and its mirror the node's peer), pull one image
// at the same moment: all succeed, the registry's access log shows at
// most 1.05x the image's layer bytes in blob GETs (the peers share the
// layers' pieces as they land), and `ctr run` of the image prints what
// its program prints. With the registry stopped, a fourth node joins and
// its containerd pulls the same tag from the cluster and runs it: its
// peer gets the manifests from the peers that hold them, and serves the
// layers from their pieces to an anonymous client because its peers saw
// the registry let anonymous clients pull from the repository. With the registry back and every peer stopped, a fifth
// containerd pulls through the same hosts directory, falls back to the
// registry as hosts.toml says, and runs the image.
func TestContainerdPullsThroughMirror(t *testing.T) {
	requireContainerd(t)
	c := newClusterOf(t, "", true)
	hello := pushHello(t, c.reg)
	ref := hello.ref(c.reg.host)
	var (
		nodes     []*node
		instances []*containerd
	)
	for _, name := range []string{"a", "b", "c"} {
		n := c.addNode(name, "")
		nodes = append(nodes, n)
		instances = append(instances, startContainerd(t, name, containerdHosts(t, c.reg.host, n.proxy)))
	}

	since := c.reg.logOffset()
	start := time.Now()
	errs := make([]error, len(instances))
	var wg sync.WaitGroup
	ready := make(chan struct{})
	for i, ctrd := range instances {
		wg.Go(func() {
			<-ready
			errs[i] = ctrd.pull(ref)
		})
	}
	close(ready)
	wg.Wait()
	pullTime := time.Since(start)
	for _, err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if t.Failed() {
		t.FailNow()
	}
	gets, got := c.reg.blobGets(since)
	ratio := float64(got) / float64(hello.layerBytes)
	t.Logf("measured: 3 containerd pulls at once through their nodes' mirrors in %v; the registry served %d blob GETs, %d bytes, %.3fx the image's %d layer bytes (%d with the config)",
		pullTime.Round(time.Millisecond), gets, got, ratio, hello.layerBytes, hello.blobBytes)
	if ratio > 1.05 {
		t.Errorf("the registry served %d blob bytes for 3 pulls, %.3fx the image's %d layer bytes, want at most 1.05x", got, ratio, hello.layerBytes)
	}
	// Each pull went through its node's mirror.
	for _, n := range nodes {
		served, pieces := n.metric(`damselfly_proxy_response_bytes_total{route="v2"}`), n.metric("damselfly_proxy_plain_blob_piece_bytes_total")
		t.Logf("measured: node %s's mirror served %d bytes, %d blob bytes from pieces", n.name, served, pieces)
		if served < hello.layerBytes {
			t.Errorf("node %s's mirror served %d bytes, want the image's %d layer bytes at least", n.name, served, hello.layerBytes)
		}
	}
	for _, ctrd := range instances {
		runHello(t, ctrd, ref, hello.want)
	}

	// The registry is down: a new node joins, and its containerd pulls
	// the tag from the cluster: manifests and layers from the peers that
	// hold them.
	c.reg.down()
	d := c.addNode("d", "")
	fourth := startContainerd(t, "d", containerdHosts(t, c.reg.host, d.proxy))
	start = time.Now()
	if err := fourth.pull(ref); err != nil {
		t.Fatalf("pull with the registry stopped, through new node d's mirror: %v\n--- node d's peer:\n%s", err, d.p.LogTail(4000))
	}
	byTag := d.metric(`damselfly_proxy_manifests_from_store_total{by="tag"}`)
	t.Logf("measured: with the registry stopped, a fourth containerd pulled through new node d's mirror in %v; node d served %d manifests by tag and %d by digest from the cluster, %d blob bytes from pieces",
		time.Since(start).Round(time.Millisecond), byTag, d.metric(`damselfly_proxy_manifests_from_store_total{by="digest"}`), d.metric("damselfly_proxy_plain_blob_piece_bytes_total"))
	if byTag == 0 {
		t.Errorf("node d served no manifest by tag from the cluster while the registry was stopped")
	}
	runHello(t, fourth, ref, hello.want)
	nodes = append(nodes, d)

	// The registry is back and the peers are stopped: containerd falls
	// back to the server hosts.toml names.
	c.reg.up()
	for _, n := range nodes {
		n.p.stop()
	}
	since = c.reg.logOffset()
	fifth := startContainerd(t, "e", instances[0].hosts)
	start = time.Now()
	if err := fifth.pull(ref); err != nil {
		t.Fatalf("pull with the peers stopped: %v", err)
	}
	pullTime = time.Since(start)
	runHello(t, fifth, ref, hello.want)
	gets, got = c.reg.blobGets(since)
	t.Logf("measured: with the peers stopped, a fifth containerd pulled in %v, falling back to the registry, which served %d blob GETs, %d bytes",
		pullTime.Round(time.Millisecond), gets, got)
	if got < hello.layerBytes {
		t.Errorf("with the peers stopped, the registry served %d blob bytes, want the image's %d layer bytes at least (the pull fell back to it)", got, hello.layerBytes)
	}
}

// runHello runs the image in ctrd and checks what it prints.
func runHello(t *testing.T, ctrd *containerd, ref, want string) {
	t.Helper()
	start := time.Now()
	out, err := ctrd.run(ref)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("containerd %s: ctr run took %v", ctrd.name, time.Since(start).Round(time.Millisecond))
	if out != want {
		t.Errorf("containerd %s: ctr run printed %q, want %q", ctrd.name, out, want)
	}
}

// logOffset is where the current registry process's log ends now.
func (r *registry) logOffset() int64 {
	r.t.Helper()
	st, err := os.Stat(r.Proc().Log())
	if err != nil {
		r.t.Fatal(err)
	}
	return st.Size()
}

// blobGet matches a blob GET the registry served in its access log
// (combined log format): `"GET /v2/REPO/blobs/sha256:... HTTP/1.1" 206 4194304`.
var blobGet = regexp.MustCompile(`"GET /v2/\S+/blobs/\S+ HTTP/[0-9.]+" 20[06] (\d+)`)

// blobGets counts the blob GETs, and their bytes, in the current registry
// process's access log after offset since. The registry logs a request
// once it is done, after the client may have read its last byte, so the
// count is read again until two reads 300ms apart agree.
func (r *registry) blobGets(since int64) (gets int, bytes int64) {
	r.t.Helper()
	count := func() (int, int64) {
		f, err := os.Open(r.Proc().Log())
		if err != nil {
			r.t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Seek(since, io.SeekStart); err != nil {
			r.t.Fatal(err)
		}
		var n int
		var sum int64
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if m := blobGet.FindStringSubmatch(sc.Text()); m != nil {
				b, _ := strconv.ParseInt(m[1], 10, 64)
				n, sum = n+1, sum+b
			}
		}
		if err := sc.Err(); err != nil {
			r.t.Fatal(err)
		}
		return n, sum
	}
	gets, bytes = count()
	for range 20 {
		time.Sleep(300 * time.Millisecond)
		g, b := count()
		if g == gets && b == bytes {
			break
		}
		gets, bytes = g, b
	}
	return gets, bytes
}
