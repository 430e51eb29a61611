package cluster

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	ctrdclient "github.com/containerd/containerd/v2/client"
	"github.com/containerd/containerd/v2/core/images"
	"github.com/containerd/containerd/v2/core/remotes/docker"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/pkg/cio"
	"github.com/containerd/containerd/v2/pkg/namespaces"
	"github.com/containerd/containerd/v2/pkg/oci"
	"github.com/containerd/containerd/v2/pkg/snapshotters"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"
	ocispec "github.com/opencontainers/image-spec/specs-go/v1"

	"damselfly/integration/harness"
	"damselfly/rafs"
	"damselfly/rafs/convert"
	"damselfly/rafs/rafstest"
)

// lazySource is the program of the lazy image: it reads /data/blob and
// prints its digest, then writes a file and appends to /data/blob (the
// rootfs is writable) and says so; with the argument "loop" it only
// reads and prints, every 200ms until it is killed.
const lazySource = `package main

import (
	"crypto/sha256"
	"fmt"
	"os"
	"time"
)

func main() {
	for {
		b, err := os.ReadFile("/data/blob")
		if err != nil {
			fmt.Println("lazy:", err)
			os.Exit(1)
		}
		fmt.Printf("lazy: /data/blob sha256:%x\n", sha256.Sum256(b))
		if len(os.Args) < 2 || os.Args[1] != "loop" {
			// The rootfs is writable: a new file, and a file of the
			// image changed in place (copied up from the lower layer).
			if err := os.WriteFile("/data/new", b[:4096], 0o644); err != nil {
				fmt.Println("lazy: write:", err)
				os.Exit(1)
			}
			f, err := os.OpenFile("/data/blob", os.O_WRONLY|os.O_APPEND, 0)
			if err == nil {
				_, err = f.Write([]byte("more"))
				f.Close()
			}
			if err != nil {
				fmt.Println("lazy: append:", err)
				os.Exit(1)
			}
			fmt.Println("lazy: wrote")
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}
`

// lazyImage is the image the snapshotter test runs: the program, the
// 2 MiB file it reads, and a 12 MiB file in a layer of its own that
// nothing reads, each of random bytes so that no compression hides what
// was fetched. It is in the registry as tag v1 (plain OCI), tag idx
// (convert --index: an index holding v1's manifest and the RAFS one),
// tag rafs (the RAFS manifest alone) and tag legacy (the RAFS manifest
// with the media types converters wrote before 2026-12-04).
type lazyImage struct {
	repo      string // "ctrd/lazy"
	want      string // the line the program prints
	rafs      string // the RAFS manifest's digest
	legacy    string // the legacy-typed RAFS manifest's digest
	bootstrap string // its bootstrap layer's digest
	blobs     map[string]int64
	unread    string // the RAFS blob of the unread layer
	plain     map[string]int64
}

func pushLazy(t *testing.T, reg *registry) *lazyImage {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	program := buildProgram(ctx, t, lazySource)
	rnd := rand.NewChaCha8([32]byte{'l', 'a', 'z', 'y'})
	data := make([]byte, 2<<20)
	rnd.Read(data)
	unread := make([]byte, 12<<20)
	rnd.Read(unread)

	img := programImage(t, "/lazy",
		gzipLayer(t, tarEntry{name: "lazy", mode: 0o755, body: program}),
		gzipLayer(t, tarEntry{name: "data/", mode: 0o755, dir: true}, tarEntry{name: "data/blob", mode: 0o644, body: data}),
		gzipLayer(t, tarEntry{name: "unread/", mode: 0o755, dir: true}, tarEntry{name: "unread/big", mode: 0o644, body: unread}))
	im := &lazyImage{repo: "ctrd/lazy", want: fmt.Sprintf("lazy: /data/blob sha256:%x", sha256.Sum256(data)),
		blobs: map[string]int64{}, plain: map[string]int64{}}
	ref, err := name.ParseReference(reg.host+"/"+im.repo+":v1", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push %s: %v", ref, err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range m.Layers {
		im.plain[l.Digest.String()] = l.Size
	}
	res, err := convert.Convert(ctx, "docker://"+reg.host+"/"+im.repo+":v1", "docker://"+reg.host+"/"+im.repo+":idx",
		convert.Options{Index: true, WorkDir: t.TempDir()})
	if err != nil {
		t.Fatalf("convert: %v", err)
	}
	im.rafs = res.Digest
	rm := readManifest(t, reg.host+"/"+im.repo+"@"+im.rafs)
	for i, l := range rm.Layers {
		switch string(l.MediaType) {
		case rafs.MediaTypeBootstrap:
			im.bootstrap = l.Digest.String()
		case rafs.MediaTypeBlob:
			im.blobs[l.Digest.String()] = l.Size
			if i == 2 {
				im.unread = l.Digest.String()
			}
		}
	}
	if im.bootstrap == "" || len(im.blobs) != 3 || im.unread == "" {
		t.Fatalf("RAFS manifest %s: got bootstrap %q and blobs %v, want a bootstrap and 3 blobs, one per layer", im.rafs, im.bootstrap, im.blobs)
	}
	rref, err := name.ParseReference(reg.host+"/"+im.repo+"@"+im.rafs, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	rimg, err := remote.Image(rref, remote.WithContext(ctx))
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Tag(ref.Context().Tag("rafs"), rimg, remote.WithContext(ctx)); err != nil {
		t.Fatalf("tag the RAFS manifest: %v", err)
	}
	legacy, err := rafstest.LegacyMediaTypes(rimg)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref.Context().Tag("legacy"), legacy, remote.WithContext(ctx)); err != nil {
		t.Fatalf("push the legacy-typed RAFS image: %v", err)
	}
	ld, err := legacy.Digest()
	if err != nil {
		t.Fatal(err)
	}
	im.legacy = ld.String()
	return im
}

func readManifest(t *testing.T, ref string) *v1.Manifest {
	t.Helper()
	r, err := name.ParseReference(ref, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(r, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	return m
}

// snapshotterProc is a `damselfly snapshotter` process and its state.
type snapshotterProc struct {
	t      *testing.T
	root   string
	sock   string
	config string
	p      *proc
	n      int
}

// startSnapshotter starts the snapshotter with its state under a new
// directory, mount daemons through node n's peer with its node cache.
// t.Cleanup stops whatever mount daemons are left and unmounts
// everything under the state directory, after containerd (started
// later) is stopped.
func startSnapshotter(t *testing.T, n *node) *snapshotterProc {
	t.Helper()
	return startSnapshotterWith(t, n, "")
}

// startSnapshotterWith is startSnapshotter with more of the
// configuration file (top-level YAML keys).
func startSnapshotterWith(t *testing.T, n *node, extra string) *snapshotterProc {
	t.Helper()
	dir := t.TempDir()
	s := &snapshotterProc{t: t, root: filepath.Join(dir, "root"), sock: filepath.Join(dir, "sn.sock"), config: filepath.Join(dir, "snapshotter.yaml")}
	mountConfig := filepath.Join(dir, "mount.yaml")
	if err := os.WriteFile(mountConfig, fmt.Appendf(nil, `backend:
  type: registry
  proxy:
    fallback: true
cache:
  dir: %s
advanced:
  backend:
    retry_limit: 2
    proxy:
      check_interval: 500ms
`, n.cache), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(s.config, fmt.Appendf(nil, `root: %s
address: %s
mount:
  config: %s
  peer: %s
advanced:
  mount:
    binary: %s
  check_interval: 500ms
  mount_timeout: 30s
%s`, s.root, s.sock, mountConfig, n.proxy, binary, extra), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		for _, pid := range mountDaemons(s.root) {
			syscall.Kill(pid, syscall.SIGTERM)
		}
		deadline := time.Now().Add(10 * time.Second)
		for len(mountDaemons(s.root)) > 0 && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		for _, pid := range mountDaemons(s.root) {
			t.Errorf("mount daemon %d did not exit on SIGTERM; killing it", pid)
			syscall.Kill(pid, syscall.SIGKILL)
		}
		unmountUnder(t, s.root)
	})
	s.start()
	return s
}

func (s *snapshotterProc) start() {
	s.t.Helper()
	s.n++
	s.p = start(s.t, fmt.Sprintf("snapshotter-%d", s.n), "--config", s.config, "snapshotter")
	s.p.waitLine("snapshotter ", 30*time.Second)
}

// mountDaemons is harness.MountDaemons.
func mountDaemons(root string) []int { return harness.MountDaemons(root) }

// ctrdClient is a containerd client library (v2) connection to one of
// the test's containerd daemons, in its own namespace.
type ctrdClient struct {
	tasks []*task
	t     *testing.T
	c     *ctrdclient.Client
	ctx   context.Context
	fifo  string
}

func newCtrdClient(t *testing.T, d *containerd) *ctrdClient {
	t.Helper()
	return newCtrdClientIn(t, d, "damselfly-test")
}

// newCtrdClientIn is newCtrdClient in namespace ns. containerd keeps
// images and snapshots per namespace, so a pull there asks the
// snapshotter about layers another namespace already has.
func newCtrdClientIn(t *testing.T, d *containerd, ns string) *ctrdClient {
	t.Helper()
	c, err := d.d.Client(t.Context(), ctrdclient.WithTimeout(10*time.Second))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	return &ctrdClient{t: t, c: c, ctx: namespaces.WithNamespace(t.Context(), ns), fifo: t.TempDir()}
}

// pull pulls and unpacks ref into snapshotter; with labels, every layer
// carries the remote-snapshot labels, as CRI passes them: the image's
// own media types, nothing else changed.
func (c *ctrdClient) pull(ref, snapshotter string, labels bool) (ctrdclient.Image, error) {
	return c.pullWith(ref, snapshotter, labels, nil)
}

// pullWith is pull with wrap (if not nil) around the image handler,
// inside the labels.
func (c *ctrdClient) pullWith(ref, snapshotter string, labels bool, wrap func(images.Handler) images.Handler) (ctrdclient.Image, error) {
	ctx, cancel := context.WithTimeout(c.ctx, 2*time.Minute)
	defer cancel()
	opts := []ctrdclient.RemoteOpt{
		ctrdclient.WithPullUnpack,
		ctrdclient.WithPullSnapshotter(snapshotter),
		ctrdclient.WithResolver(docker.NewResolver(docker.ResolverOptions{
			Hosts: docker.ConfigureDefaultRegistries(docker.WithPlainHTTP(docker.MatchLocalhost)),
		})),
	}
	if labels || wrap != nil {
		var info func(images.Handler) images.Handler
		if labels {
			info = snapshotters.AppendInfoHandlerWrapper(ref)
		}
		opts = append(opts, ctrdclient.WithImageHandlerWrapper(func(h images.Handler) images.Handler {
			if wrap != nil {
				h = wrap(h)
			}
			if info != nil {
				h = info(h)
			}
			return h
		}))
	}
	return c.c.Pull(ctx, ref, opts...)
}

// legacyLayersAsOCI shows containerd's unpacker the layers of a RAFS
// manifest with the legacy media types (application/vnd.damselfly.rafs.*)
// as OCI layers. containerd (1.6 and 2.x, CRI included) unpacks only
// layers under application/vnd.oci.image.layer. or of a Docker type
// (images.IsLayerType), which is why the current types are under that
// prefix; for a legacy image only a client that knows RAFS, like this
// one, can bring its layers to the snapshotter. The snapshotter reads
// the real media types from the registry.
func legacyLayersAsOCI(h images.Handler) images.Handler {
	return images.HandlerFunc(func(ctx context.Context, desc ocispec.Descriptor) ([]ocispec.Descriptor, error) {
		children, err := h.Handle(ctx, desc)
		if err != nil || !images.IsManifestType(desc.MediaType) {
			return children, err
		}
		for i := range children {
			switch children[i].MediaType {
			case rafs.LegacyMediaTypeBlob, rafs.LegacyMediaTypeBootstrap:
				children[i].MediaType = ocispec.MediaTypeImageLayer
			}
		}
		return children, nil
	})
}

// task is a running container of the test, with what it printed.
type task struct {
	c    *ctrdClient
	id   string
	ctr  ctrdclient.Container
	task ctrdclient.Task
	exit <-chan ctrdclient.ExitStatus
	out  *lineBuffer
}

// run starts a container of img on snapshotter with args.
func (c *ctrdClient) run(id string, img ctrdclient.Image, snapshotter string, args ...string) *task {
	c.t.Helper()
	ctx := c.ctx
	ctr, err := c.c.NewContainer(ctx, id,
		ctrdclient.WithImage(img),
		ctrdclient.WithSnapshotter(snapshotter),
		ctrdclient.WithNewSnapshot(id+"-rootfs", img),
		ctrdclient.WithNewSpec(oci.WithImageConfig(img), oci.WithProcessArgs(append([]string{"/lazy"}, args...)...)))
	if err != nil {
		c.t.Fatalf("container %s: %v", id, err)
	}
	tk := &task{c: c, id: id, ctr: ctr, out: &lineBuffer{}}
	c.tasks = append(c.tasks, tk)
	c.t.Cleanup(tk.remove)
	tk.task, err = ctr.NewTask(ctx, cio.NewCreator(cio.WithStreams(nil, tk.out, tk.out), cio.WithFIFODir(c.fifo)))
	if err != nil {
		c.t.Fatalf("task %s: %v", id, err)
	}
	if tk.exit, err = tk.task.Wait(ctx); err != nil {
		c.t.Fatal(err)
	}
	if err := tk.task.Start(ctx); err != nil {
		c.t.Fatalf("start %s: %v", id, err)
	}
	return tk
}

// wait waits for the task to exit and returns what it printed.
func (tk *task) wait(timeout time.Duration) string {
	tk.c.t.Helper()
	select {
	case st := <-tk.exit:
		if st.ExitCode() != 0 {
			tk.c.t.Errorf("container %s exited %d: %s", tk.id, st.ExitCode(), tk.out.String())
		}
	case <-time.After(timeout):
		tk.c.t.Fatalf("container %s still running after %v: %s", tk.id, timeout, tk.out.String())
	}
	// The exit can arrive before the last output is copied from the
	// task's FIFOs: wait for the copy (bounded, for a shim that keeps
	// them open).
	copied := make(chan struct{})
	go func() {
		tk.task.IO().Wait()
		close(copied)
	}()
	select {
	case <-copied:
	case <-time.After(10 * time.Second):
		tk.c.t.Logf("container %s: its output was still being copied 10s after it exited", tk.id)
	}
	return strings.TrimSpace(tk.out.String())
}

// remove kills the task if it runs and deletes the container with its
// snapshot. It is idempotent.
func (tk *task) remove() {
	if tk.ctr == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(tk.c.ctx), 30*time.Second)
	defer cancel()
	if tk.task != nil {
		if st, err := tk.task.Status(ctx); err == nil && st.Status == ctrdclient.Running {
			tk.task.Kill(ctx, syscall.SIGKILL)
			select {
			case <-tk.exit:
			case <-ctx.Done():
			}
		}
		if _, err := tk.task.Delete(ctx); err != nil {
			tk.c.t.Errorf("delete task %s: %v", tk.id, err)
		}
	}
	if err := tk.ctr.Delete(ctx, ctrdclient.WithSnapshotCleanup); err != nil {
		tk.c.t.Errorf("delete container %s: %v", tk.id, err)
	}
	tk.ctr = nil
}

// removeAll removes every container the client ran.
func (c *ctrdClient) removeAll() {
	for _, tk := range c.tasks {
		tk.remove()
	}
}

// lineBuffer collects a task's output.
type lineBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lineBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lineBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// lines returns the complete lines so far.
func (l *lineBuffer) lines() []string {
	s := l.String()
	if i := strings.LastIndexByte(s, '\n'); i >= 0 {
		return strings.Split(s[:i], "\n")
	}
	return nil
}

// waitLines waits until the task has printed n lines, all want.
func (tk *task) waitLines(n int, want string, timeout time.Duration) {
	tk.c.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		lines := tk.out.lines()
		for _, l := range lines {
			if l != want {
				tk.c.t.Fatalf("container %s printed %q, want %q", tk.id, l, want)
			}
		}
		if len(lines) >= n {
			return
		}
		if time.Now().After(deadline) {
			tk.c.t.Fatalf("container %s printed %d lines in %v, want %d: %q", tk.id, len(lines), timeout, n, tk.out.String())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// snapshotList is the snapshotter's snapshots in the test's namespace
// as `ctr snapshots ls` shows them: name, parent and kind, sorted. It
// asks again for up to 20s while containerd reconnects to a restarted
// snapshotter.
func (c *ctrdClient) snapshotList(snapshotter string) []string {
	c.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for {
		var out []string
		err := c.c.SnapshotService(snapshotter).Walk(c.ctx, func(_ context.Context, info snapshots.Info) error {
			out = append(out, info.Name+" "+info.Parent+" "+info.Kind.String())
			return nil
		})
		if err == nil {
			slices.Sort(out)
			return out
		}
		if time.Now().After(deadline) {
			c.t.Fatalf("list snapshots of %s: %v", snapshotter, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// blobServed is what the registry served of one blob.
type blobServed struct {
	full, ranged int   // GETs answered 200 and 206
	bytes        int64 // body bytes
}

// blobAccess matches a blob GET in the registry's access log.
var blobAccess = regexp.MustCompile(`"GET /v2/\S+/blobs/(sha256:[0-9a-f]{64}) HTTP/[0-9.]+" (200|206) (\d+)`)

// blobsServed reads the registry's access log after offset since, by
// blob digest, until two reads 300ms apart agree (see blobGets).
func (r *registry) blobsServed(since int64) map[string]blobServed {
	r.t.Helper()
	read := func() map[string]blobServed {
		f, err := os.Open(r.Proc().Log())
		if err != nil {
			r.t.Fatal(err)
		}
		defer f.Close()
		if _, err := f.Seek(since, io.SeekStart); err != nil {
			r.t.Fatal(err)
		}
		out := map[string]blobServed{}
		sc := bufio.NewScanner(f)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			m := blobAccess.FindStringSubmatch(sc.Text())
			if m == nil {
				continue
			}
			b := out[m[1]]
			n, _ := strconv.ParseInt(m[3], 10, 64)
			b.bytes += n
			if m[2] == "200" {
				b.full++
			} else {
				b.ranged++
			}
			out[m[1]] = b
		}
		return out
	}
	got := read()
	for range 20 {
		time.Sleep(300 * time.Millisecond)
		again := read()
		if fmt.Sprint(again) == fmt.Sprint(got) {
			break
		}
		got = again
	}
	return got
}

// Scenario (issue 22): containerd (Debian's 1.6.20, driven by the v2
// client library) pulls a RAFS-only tag through `damselfly snapshotter`
// as CRI pulls: the remote-snapshot labels, the image's own media types.
// No RAFS blob is downloaded at
// pull time; the container reads its file through the lazy mount and
// prints its digest, and the registry served the blobs only by range,
// nothing of the layer nobody read. Beside it, the same index pulled
// by tag with the default overlayfs snapshotter resolves to the
// original image, downloaded in full, and prints the same; the RAFS-only
// tag with overlayfs fails, naming the RAFS media type, before anything
// is unpacked. Two
// containers of the image share one mount daemon. The snapshotter is
// SIGKILLed with both running: they keep reading, the restarted
// snapshotter adopts the daemon (same pid, no second one), the snapshot
// list is unchanged, and a third container starts on the adopted mount.
// Removing the containers stops the daemon and leaves nothing mounted.
// A RAFS image whose bootstrap is corrupt fails the pull naming the
// layer. The image with the legacy media types mounts with `damselfly
// mount`, and through the snapshotter runs for a client that shows its
// layers to the unpacker as OCI layers (a CRI-style pull of it fails:
// containerd never sees its layers).
func TestSnapshotterRunsRAFSLazily(t *testing.T) {
	requireContainerd(t)
	c := newClusterOf(t, "", true)
	n := c.addNode("a", "")
	im := pushLazy(t, c.reg)
	sn := startSnapshotter(t, n)
	ctrd := startContainerdWith(t, "sn", t.TempDir(), harness.ContainerdConfig{
		Snapshotters: map[string]string{"damselfly": sn.sock},
		Extra: `
[plugins."io.containerd.gc.v1.scheduler"]
  deletion_threshold = 1
`})
	cl := newCtrdClient(t, ctrd)

	// Pull the RAFS image lazily.
	rafsRef := c.reg.host + "/" + im.repo + ":rafs"
	since := c.reg.logOffset()
	start := time.Now()
	img, err := cl.pull(rafsRef, "damselfly", true)
	if err != nil {
		t.Fatalf("pull %s through the snapshotter: %v\n--- snapshotter:\n%s", rafsRef, err, sn.p.LogTail(4000))
	}
	pullTime := time.Since(start)
	served := c.reg.blobsServed(since)
	for d := range im.blobs {
		if b := served[d]; b.bytes > 0 {
			t.Errorf("the pull fetched %d bytes of RAFS blob %s (%+v), want none", b.bytes, d, b)
		}
	}
	if b := served[im.bootstrap]; b.bytes == 0 {
		t.Errorf("the pull did not fetch the bootstrap %s: the snapshotter checks it at pull time", im.bootstrap)
	}
	// The pull started the image's mount daemon (mount.start_on_pull),
	// without waiting for it; the container below uses that one.
	var pulled []int
	for deadline := time.Now().Add(15 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if pulled = mountDaemons(sn.root); len(pulled) > 0 {
			break
		}
	}
	if len(pulled) != 1 {
		t.Errorf("mount daemons %v after the pull, want the one the pull starts", pulled)
	}

	// Run it: the output proves the bytes, the log that only what was
	// read came from the registry, by range.
	start = time.Now()
	one := cl.run("lazy-once", img, "damselfly")
	if got := one.wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Fatalf("container printed %q, want %q\n--- snapshotter:\n%s", got, im.want, sn.p.LogTail(4000))
	}
	runTime := time.Since(start)
	served = c.reg.blobsServed(since)
	var blobBytes, total int64
	for d, size := range im.blobs {
		b := served[d]
		blobBytes += b.bytes
		total += size
		if b.full > 0 {
			t.Errorf("RAFS blob %s was downloaded whole %d times (%+v), want ranges only", d, b.full, b)
		}
	}
	if b := served[im.unread]; b.bytes > 0 {
		t.Errorf("the registry served %d bytes of the blob of the layer nobody read (%s), want 0", b.bytes, im.unread)
	}
	t.Logf("measured: RAFS pull through the snapshotter %v, first container run %v; the registry served %d of the %d RAFS blob bytes, by range",
		pullTime.Round(time.Millisecond), runTime.Round(time.Millisecond), blobBytes, total)
	pids := mountDaemons(sn.root)
	if len(pids) != 1 {
		t.Fatalf("mount daemons %v while the image is in use, want 1", pids)
	}
	if len(pulled) == 1 && pids[0] != pulled[0] {
		t.Errorf("the container's mount daemon is %d, want %d, the one the pull started", pids[0], pulled[0])
	}
	one.remove()

	// The same index by tag with the default overlayfs snapshotter: the
	// original image, downloaded in full.
	plainRef := c.reg.host + "/" + im.repo + ":idx"
	since = c.reg.logOffset()
	start = time.Now()
	plainImg, err := cl.pull(plainRef, "overlayfs", false)
	if err != nil {
		t.Fatalf("pull %s with overlayfs: %v", plainRef, err)
	}
	plainPull := time.Since(start)
	served = c.reg.blobsServed(since)
	for d, size := range im.plain {
		if b := served[d]; b.bytes < size {
			t.Errorf("overlayfs pull: the registry served %d bytes of layer %s, want all %d", b.bytes, d, size)
		}
	}
	start = time.Now()
	if got := cl.run("plain-once", plainImg, "overlayfs").wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("overlayfs container printed %q, want %q", got, im.want)
	}
	plainRun := time.Since(start)

	// The RAFS-only tag with overlayfs, as a node without damselfly
	// would pull it: containerd counts the layers, downloads the first
	// blob, finds no stream processor for its media type and fails
	// naming it. No layer is unpacked: no snapshot of the image exists.
	before := cl.snapshotList("overlayfs")
	if _, err := cl.pull(rafsRef, "overlayfs", false); err == nil {
		t.Errorf("pull of the RAFS-only tag with overlayfs succeeded")
	} else if !strings.Contains(err.Error(), rafs.MediaTypeBlob) {
		t.Errorf("pull of the RAFS-only tag with overlayfs: %v; want the error to name %s", err, rafs.MediaTypeBlob)
	} else {
		t.Logf("RAFS-only tag with overlayfs: %v", err)
	}
	if after := cl.snapshotList("overlayfs"); !slices.Equal(after, before) {
		t.Errorf("overlayfs snapshots after the failed pull:\n%s\nwant as before:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	t.Logf("measured: overlayfs pull of the original image (from the index) %v, run %v; the lazy RAFS image's pull to exit (%v) took %.2fx this (a 16 MiB image on loopback, no link shaping)",
		plainPull.Round(time.Millisecond), plainRun.Round(time.Millisecond),
		(pullTime + runTime).Round(time.Millisecond), float64(pullTime+runTime)/float64(plainPull+plainRun))

	// The same through the damselfly snapshotter, labels and all:
	// containerd still picks the original manifest, which the RAFS
	// manifest beside it in the index serves (its own test:
	// TestSnapshotterServesIndexBySibling), so the only mount daemon is
	// the RAFS image's.
	viaSn, err := cl.pull(plainRef, "damselfly", true)
	if err != nil {
		t.Fatalf("pull %s through the snapshotter: %v", plainRef, err)
	}
	viaSnTask := cl.run("plain-sn", viaSn, "damselfly")
	if got := viaSnTask.wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("index image through the snapshotter printed %q, want %q", got, im.want)
	}
	entries, _ := os.ReadDir(filepath.Join(sn.root, "mounts"))
	for _, e := range entries {
		if !strings.HasPrefix(im.rafs, "sha256:"+e.Name()) {
			t.Errorf("mount daemon directory %s that is not the RAFS image's", e.Name())
		}
	}
	viaSnTask.remove()

	// Two containers share one daemon.
	a := cl.run("lazy-a", img, "damselfly", "loop")
	b := cl.run("lazy-b", img, "damselfly", "loop")
	a.waitLines(2, im.want, 30*time.Second)
	b.waitLines(2, im.want, 30*time.Second)
	shared := mountDaemons(sn.root)
	if len(shared) != 1 {
		t.Fatalf("mount daemons %v with two containers of one image, want 1", shared)
	}

	// SIGKILL the snapshotter: the containers read on; the restarted
	// snapshotter adopts the daemon.
	before = cl.snapshotList("damselfly")
	sn.p.Kill()
	linesAtKill := len(a.out.lines())
	a.waitLines(linesAtKill+5, im.want, 30*time.Second)
	if got := mountDaemons(sn.root); !slices.Equal(got, shared) {
		t.Errorf("mount daemons %v after the snapshotter's SIGKILL, want %v", got, shared)
	}
	sn.start()
	if line, err := sn.p.LogLine("adopted a running mount daemon"); err != nil || line == "" {
		t.Errorf("the restarted snapshotter did not log that it adopted the mount daemon (%v)", err)
	}
	if after := cl.snapshotList("damselfly"); !slices.Equal(after, before) {
		t.Errorf("snapshots after the restart:\n%s\nwant as before:\n%s", strings.Join(after, "\n"), strings.Join(before, "\n"))
	}
	third := cl.run("lazy-c", img, "damselfly")
	if got := third.wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("container after the restart printed %q, want %q", got, im.want)
	}
	third.remove()
	if got := mountDaemons(sn.root); !slices.Equal(got, shared) {
		t.Errorf("mount daemons %v after the restart, want the adopted %v", got, shared)
	}
	b.waitLines(len(b.out.lines())+2, im.want, 30*time.Second)

	// Removing both containers stops the daemon and its mount.
	a.remove()
	b.remove()
	deadline := time.Now().Add(30 * time.Second)
	for len(mountDaemons(sn.root)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := mountDaemons(sn.root); len(left) > 0 {
		t.Errorf("mount daemons %v after the last container was removed, want none", left)
	}
	if left := mountsUnder(t, sn.root); len(left) > 0 {
		t.Errorf("mounted under the snapshotter's root after the last container was removed: %v", left)
	}

	// A mount daemon that dies is replaced at the same mountpoint for new
	// readers while a snapshot still uses the image.
	kept := cl.run("lazy-d", img, "damselfly")
	if got := kept.wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("container printed %q, want %q", got, im.want)
	}
	dead := mountDaemons(sn.root)
	if len(dead) != 1 {
		t.Fatalf("mount daemons %v, want 1", dead)
	}
	syscall.Kill(dead[0], syscall.SIGKILL)
	killed := time.Now()
	var replaced []int
	for time.Since(killed) < 30*time.Second {
		if replaced = mountDaemons(sn.root); len(replaced) == 1 && replaced[0] != dead[0] {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	if len(replaced) != 1 || replaced[0] == dead[0] {
		t.Fatalf("mount daemons %v %v after SIGKILL of %d, want one new one", replaced, time.Since(killed).Round(time.Millisecond), dead[0])
	}
	t.Logf("measured: a killed mount daemon was replaced after %v", time.Since(killed).Round(time.Millisecond))
	if got := cl.run("lazy-e", img, "damselfly").wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("container on the replaced mount printed %q, want %q", got, im.want)
	}
	kept.remove()
	cl.removeAll()
	deadline = time.Now().Add(30 * time.Second)
	for len(mountDaemons(sn.root)) > 0 && time.Now().Before(deadline) {
		time.Sleep(100 * time.Millisecond)
	}
	if left := mountDaemons(sn.root); len(left) > 0 {
		t.Errorf("mount daemons %v after the last container was removed again, want none", left)
	}

	// A corrupt bootstrap fails the pull, naming the layer.
	badRef, badLayer := pushCorruptBootstrap(t, c.reg, im)
	if _, err := cl.pull(badRef, "damselfly", true); err == nil {
		t.Errorf("pull of a RAFS image with a corrupt bootstrap succeeded")
	} else if !strings.Contains(err.Error(), badLayer) {
		t.Errorf("pull of a RAFS image with a corrupt bootstrap: %v; want the error to name layer %s", err, badLayer)
	} else {
		t.Logf("corrupt bootstrap: %v", err)
	}

	// The legacy-typed image: `damselfly mount` reads it.
	m := n.mountRef("docker://"+n.gate.host+"/"+im.repo+":legacy", "", "")
	if b, err := os.ReadFile(filepath.Join(m.dir, "data/blob")); err != nil {
		t.Errorf("read the legacy image's /data/blob in its mount: %v", err)
	} else if got := fmt.Sprintf("lazy: /data/blob sha256:%x", sha256.Sum256(b)); got != im.want {
		t.Errorf("legacy image's mount: %q, want %q", got, im.want)
	}
	m.unmount()
	// Through the snapshotter, in a namespace of its own (so containerd
	// asks the snapshotter again about layers whose chain IDs the
	// current image's pull already has): a CRI-style pull cannot see its
	// layers; a client that shows them as OCI layers runs it lazily.
	legacyRef := c.reg.host + "/" + im.repo + ":legacy"
	old := newCtrdClientIn(t, ctrd, "damselfly-legacy")
	if _, err := old.pull(legacyRef, "damselfly", true); err == nil {
		t.Errorf("a CRI-style pull of the legacy-typed image succeeded; containerd should not count its layers")
	} else {
		t.Logf("legacy media types, CRI-style pull: %v", err)
	}
	since = c.reg.logOffset()
	oldImg, err := old.pullWith(legacyRef, "damselfly", true, legacyLayersAsOCI)
	if err != nil {
		t.Fatalf("pull %s through the snapshotter, layers shown as OCI: %v\n--- snapshotter:\n%s", legacyRef, err, sn.p.LogTail(4000))
	}
	served = c.reg.blobsServed(since)
	for d := range im.blobs {
		if b := served[d]; b.bytes > 0 {
			t.Errorf("the legacy image's pull fetched %d bytes of RAFS blob %s, want none", b.bytes, d)
		}
	}
	if got := old.run("legacy", oldImg, "damselfly").wait(time.Minute); got != im.want+"\nlazy: wrote" {
		t.Errorf("legacy image through the snapshotter printed %q, want %q\n--- snapshotter:\n%s", got, im.want, sn.p.LogTail(4000))
	}
	old.removeAll()
}

// mountsUnder lists the mountpoints below dir.
func mountsUnder(t *testing.T, dir string) []string {
	t.Helper()
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			out = append(out, f[4])
		}
	}
	return out
}

// pushCorruptBootstrap pushes im's RAFS image with its bootstrap layer
// replaced by bytes that are no bootstrap (the manifest pins them, so
// only the format check can tell) and returns its reference by digest
// and the bad layer's digest.
func pushCorruptBootstrap(t *testing.T, reg *registry, im *lazyImage) (string, string) {
	t.Helper()
	src, err := name.ParseReference(reg.host+"/"+im.repo+"@"+im.rafs, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	img, err := remote.Image(src, remote.WithContext(t.Context()))
	if err != nil {
		t.Fatal(err)
	}
	m, err := img.Manifest()
	if err != nil {
		t.Fatal(err)
	}
	boot := m.Layers[len(m.Layers)-1]
	garbage := bytes.Repeat([]byte("not a bootstrap "), 64)
	bad := static.NewLayer(garbage, types.MediaType(rafs.MediaTypeBootstrap))
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	out := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	out = mutate.ConfigMediaType(out, m.Config.MediaType)
	cf, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	var adds []mutate.Addendum
	for i, l := range layers[:len(layers)-1] {
		adds = append(adds, mutate.Addendum{Layer: l, MediaType: types.MediaType(rafs.MediaTypeBlob), Annotations: m.Layers[i].Annotations})
	}
	adds = append(adds, mutate.Addendum{Layer: bad, MediaType: types.MediaType(rafs.MediaTypeBootstrap), Annotations: boot.Annotations})
	if out, err = mutate.Append(out, adds...); err != nil {
		t.Fatal(err)
	}
	bd, err := bad.Digest()
	if err != nil {
		t.Fatal(err)
	}
	cf = cf.DeepCopy()
	cf.RootFS.DiffIDs[len(cf.RootFS.DiffIDs)-1] = bd
	if out, err = mutate.ConfigFile(out, cf); err != nil {
		t.Fatal(err)
	}
	out = mutate.Annotations(out, m.Annotations).(v1.Image)
	dst, err := name.ParseReference(reg.host+"/"+im.repo+":bad", name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(dst, out, remote.WithContext(t.Context())); err != nil {
		t.Fatal(err)
	}
	d, err := out.Digest()
	if err != nil {
		t.Fatal(err)
	}
	return reg.host + "/" + im.repo + "@" + d.String(), bd.String()
}
