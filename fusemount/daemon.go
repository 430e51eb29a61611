package fusemount

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/hanwen/go-fuse/v2/fuse"
	"golang.org/x/sys/unix"

	"damselfly/fusemount/backend"
	"damselfly/rafs"
	"damselfly/rafs/cache"
	"damselfly/rafs/image"
	"damselfly/rafs/transport"
)

// Options say what to mount where.
type Options struct {
	// Image is a transport reference (oci:, docker://) to a RAFS image.
	Image string
	// Bootstrap is a local bootstrap file, used instead of Image, with its
	// blobs in BlobDir (default: the bootstrap's directory) unless the
	// config names a backend.
	Bootstrap string
	BlobDir   string
	// Mountpoint is an existing directory.
	Mountpoint string
	Config     Config
	Transport  transport.Options
	Logger     *slog.Logger
	// Version is reported by the control API.
	Version string
	// Ready, if set, is called once the filesystem is mounted and served.
	Ready func(*Daemon)
	// SelfAccess says this process will itself open files on the mount
	// (tests that mount in-process). It runs go-fuse's poll hack once
	// mounted, which such a process needs; a daemon must leave it off:
	// killed during the hack, it could never exit.
	SelfAccess bool

	// disabledCaps are FUSE capabilities withheld from the kernel, for
	// tests of kernels that lack them.
	disabledCaps uint64
}

// Daemon is one mounted image. It lives exactly as long as its mount.
type Daemon struct {
	opts    Options
	log     *slog.Logger
	image   string
	digest  string
	boot    *rafs.Bootstrap
	cache   *cache.Cache
	be      *backendAdapter
	fetcher *Fetcher
	copies  *fileCopies // nil: no file copies
	metrics *Metrics
	server  *fuse.Server
	fsys    *rafsFS
	started time.Time
	state   stateBox
	pf      *prefetcher
	// kernelPath is where the kernel reads the mount from (a kernel
	// image, or the loop device of a lazy kernel mount); "" while FUSE
	// serves it. kernelSource reads it.
	kernelMu   sync.Mutex
	kernelPath string
}

type stateBox struct {
	mu sync.Mutex
	s  string
}

func (b *stateBox) set(s string) { b.mu.Lock(); b.s = s; b.mu.Unlock() }
func (b *stateBox) get() string  { b.mu.Lock(); defer b.mu.Unlock(); return b.s }

// ErrAlreadyMounted is returned when the mountpoint is already a live mount.
var ErrAlreadyMounted = errors.New("already mounted")

// SocketPath is the default control socket of a mountpoint.
func SocketPath(mountpoint string) string {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		abs = mountpoint
	}
	sum := sha256.Sum256([]byte(filepath.Clean(abs)))
	return filepath.Join(runDir(), fmt.Sprintf("mount-%x.sock", sum[:8]))
}

func runDir() string {
	if os.Geteuid() == 0 {
		return "/run/damselfly"
	}
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
		return filepath.Join(d, "damselfly")
	}
	return filepath.Join(os.TempDir(), fmt.Sprintf("damselfly-%d", os.Getuid()))
}

// Run mounts the image and serves it until the mountpoint is unmounted
// (by anyone) or ctx is cancelled, which unmounts it. It returns only when
// nothing it started is left running.
func Run(ctx context.Context, opts Options) (err error) {
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if err := opts.Config.Validate(); err != nil {
		return fmt.Errorf("invalid mount config:\n%w", err)
	}
	d := &Daemon{opts: opts, log: opts.Logger, metrics: NewMetrics(), started: time.Now()}
	d.state.set("starting")
	var cleanups []func() error
	defer func() {
		for i := len(cleanups) - 1; i >= 0; i-- {
			err = errors.Join(err, cleanups[i]())
		}
	}()

	mp, err := prepareMountpoint(opts.Mountpoint, d.log)
	if err != nil {
		return err
	}
	// The cache first: open keeps the image's bootstrap in it.
	if c := opts.Config.Cache; c.Dir != "" {
		c.Logger = d.log
		d.cache, err = cache.Open(c)
		if err != nil {
			return fmt.Errorf("node cache: %w", err)
		}
		cleanups = append(cleanups, d.cache.Close)
		d.metrics.watchCache(d.cache)
	}
	if err := d.open(ctx); err != nil {
		return err
	}
	cleanups = append(cleanups, d.boot.Close, d.be.Close)
	// Grants from the node's peer for every blob of the image, asked
	// while the mount comes up: with them this mount reads through a
	// registry outage for its whole life (proxy/authz.go).
	granted := make(chan struct{})
	go func() {
		defer close(granted)
		d.authorize(ctx)
	}()
	cleanups = append(cleanups, func() error { <-granted; return nil })
	d.fetcher, err = NewFetcher(d.boot, d.cache, d.be, FetcherConfig{
		AmplifyIO: opts.Config.AmplifyIO, MemoryBytes: opts.Config.MemoryBytes, ReadaheadChunks: opts.Config.ReadaheadChunks,
	}, d.metrics, d.log)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, func() error { d.fetcher.Close(); return nil })

	fsys := newRafsFS(d.boot, d.fetcher, d.image, opts.Config.EntryTimeout, d.log)
	d.fsys = fsys
	fsys.noCaps = opts.disabledCaps
	if dir := opts.Config.fileCopiesDir(); dir != "" {
		if d.copies, err = openFileCopies(dir, opts.Config.FileCopies.Capacity, d.log); err != nil {
			// Reads go through the daemon, as without copies.
			d.log.Warn("no file copies: every read goes through the daemon", "err", err)
		} else {
			cleanups = append(cleanups, func() error { d.copies.Close(); return nil })
			d.metrics.watchFileCopies(d.copies)
			fsys.pt = newPassthrough(d.boot, d.copies, d.fetcher, d.metrics, d.log)
			cleanups = append(cleanups, func() error { fsys.pt.Close(); return nil })
		}
	}
	// The control socket is bound before the mount exists: a daemon that
	// cannot serve it fails before anyone can see (and read from) a mount
	// that would vanish again.
	api, err := startAPI(d, opts.Config.APISocket, mp)
	if err != nil {
		return err
	}
	cleanups = append(cleanups, api.Close)
	// An image whole on the node is served by the kernel (kernelimage.go).
	ki := d.openKernelImages()
	if ki != nil {
		if img := d.readyKernelImage(ctx, ki); img != "" {
			if served, err := d.serveKernel(ctx, mp, img); served {
				return err
			}
		}
	}
	// Nobody sees the mount before its grants are settled: a job that
	// starts reading at once must be able to read through an outage that
	// begins at once.
	<-granted
	if ki != nil && opts.Config.KernelImage.Lazy {
		if served, err := d.serveLazyKernel(ctx, mp, ki); served {
			return err
		}
	}
	root := os.Geteuid() == 0
	allowOther := root
	if opts.Config.AllowOther != nil {
		allowOther = *opts.Config.AllowOther
	}
	d.server, err = fuse.NewServer(fsys, mp, &fuse.MountOptions{
		FsName:        "damselfly:" + d.image,
		Name:          "damselfly",
		Options:       []string{"ro", "default_permissions"},
		AllowOther:    allowOther,
		DirectMount:   root,
		MaxWrite:      1 << 20,
		MaxReadAhead:  1 << 20,
		MaxBackground: 64,
		Logger:        nil,

		DisabledCapabilities: opts.disabledCaps,
	})
	if err != nil {
		return fmt.Errorf("mount %s: %w", mp, err)
	}
	if err := raiseReadahead(mp, kernelReadaheadKB); err != nil {
		// Not root, or no sysfs: reads stay at the kernel's 128 KiB.
		d.log.Debug("kernel readahead of the mount left as it is", "mountpoint", mp, "err", err)
	}
	served := make(chan struct{})
	go func() {
		d.server.Serve()
		close(served)
	}()
	// NewServer returns once the mount exists (both the direct mount and
	// fusermount3 are done by then). WaitMount adds go-fuse's poll hack,
	// which opens, polls and closes a file on this very mount: needed by
	// a process that opens files on its own mount (Go's netpoller would
	// otherwise send the kernel POLL requests for them), and dangerous in
	// a daemon killed while that close waits for its own reply, which
	// can then never exit (a zombie holding /dev/fuse and a dead mount,
	// seen in CI). The daemon never reads its own mount, so only a
	// process that does (tests mounting in-process) asks for it.
	if opts.SelfAccess {
		if err := d.server.WaitMount(); err != nil {
			d.unmount(mp)
			<-served
			return fmt.Errorf("mount %s: %w", mp, err)
		}
	}
	d.state.set("running")
	d.log.Info("mounted", "image", d.image, "mountpoint", mp, "files", d.boot.InodeCount(), "ready_after", time.Since(d.started).Round(time.Millisecond))

	pctx, stopPrefetch := context.WithCancel(ctx)
	if opts.Config.Prefetch.Enable {
		d.pf = startPrefetch(pctx, d.boot, d.fetcher, opts.Config.Prefetch, d.metrics, d.log)
	}
	var kernelBuild sync.WaitGroup
	if ki != nil {
		kernelBuild.Go(func() { d.buildWhenWhole(pctx, ki) })
	}
	if opts.Ready != nil {
		opts.Ready(d)
	}

	select {
	case <-served:
		d.log.Info("unmounted externally; exiting", "mountpoint", mp)
	case <-ctx.Done():
		d.state.set("stopping")
		d.log.Info("signal received; unmounting", "mountpoint", mp)
		d.unmount(mp)
		<-served
	}
	d.state.set("stopped")
	stopPrefetch()
	if d.pf != nil {
		d.pf.wait()
	}
	kernelBuild.Wait()
	return nil
}

// grantTimeout bounds the grants request at mount time.
const grantTimeout = 10 * time.Second

// authorize asks the peer for grants for the image's blobs; a failure
// only costs reads through a later outage, so it is logged.
func (d *Daemon) authorize(ctx context.Context) {
	if d.be.remote == nil {
		return
	}
	blobs, err := d.boot.Blobs()
	if err != nil {
		return
	}
	ds := make([]rafs.Digest, len(blobs))
	for i, b := range blobs {
		ds[i] = b.Digest
	}
	ctx, cancel := context.WithTimeout(ctx, grantTimeout)
	defer cancel()
	if err := d.be.remote.Authorize(ctx, ds); err != nil {
		d.log.Warn("no grants from the peer: reads of blobs not read before a registry outage will fail during it", "err", err)
	}
}

// unmount detaches the filesystem; a lazy detach when it is busy, so the
// daemon never outlives its mount.
func (d *Daemon) unmount(mp string) {
	if err := d.server.Unmount(); err == nil {
		return
	} else {
		d.log.Warn("unmount failed; detaching lazily", "mountpoint", mp, "err", err)
	}
	if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
		d.log.Error("lazy unmount failed", "mountpoint", mp, "err", err)
	}
}

// open resolves the image to a verified bootstrap and a backend.
func (d *Daemon) open(ctx context.Context) error {
	o := d.opts
	cfg := o.Config.Backend
	switch {
	case o.Bootstrap != "":
		b, err := rafs.Open(o.Bootstrap, rafs.OpenOptions{})
		if err != nil {
			return err
		}
		d.boot, d.image = b, o.Bootstrap
		if cfg.Type == "" || (cfg.Type == "registry" && cfg.Host == "") {
			dir := o.BlobDir
			if dir == "" {
				dir = filepath.Dir(o.Bootstrap)
			}
			d.be = &backendAdapter{local: rafs.NewDirBlobs(dir)}
			return nil
		}
	case o.Image != "":
		ref, err := transport.Parse(o.Image, o.Transport)
		if err != nil {
			return err
		}
		topts := o.Transport
		if ref.Transport == transport.Docker && cfg.Proxy.URL != "" && topts.Mirror == "" {
			// The manifest and the bootstrap come through the node's peer
			// too, so a mount started while the registry is down is
			// served from the cluster (and falls back as chunks do).
			topts.Mirror, topts.MirrorOnly = cfg.Proxy.URL, !cfg.Proxy.Fallback
		}
		img, err := image.Open(ctx, o.Image, image.Options{Transport: topts, MaxBootstrapSize: o.Config.MaxBootstrapBytes})
		if err != nil {
			return err
		}
		// The image's own blob reader is not used for chunk reads; the
		// backend chain below is. Keep only the verified bootstrap,
		// mapped from a file when there is a cache directory for it, so
		// its pages are file-backed and reclaimable rather than heap.
		d.boot, d.image, d.digest = img.Bootstrap(), o.Image, img.Digest.String()
		if d.cache != nil {
			if b, err := persistBootstrap(d.cache, img.Digest.Hex, d.boot); errors.Is(err, cache.ErrReadOnly) {
				d.log.Info("keeping the bootstrap in memory: the node cache is read-only for this user")
			} else if err != nil {
				d.log.Warn("keeping the bootstrap in memory", "err", err)
			} else {
				d.boot = b
				debug.FreeOSMemory()
			}
		}
		switch ref.Transport {
		case transport.OCI:
			if cfg.Type == "" || cfg.Type == "registry" && cfg.Host == "" {
				cfg.Type, cfg.Dir = "oci", ref.Path
			}
		case transport.Docker:
			if cfg.Host == "" {
				cfg.Host = ref.Name.Context().RegistryStr()
			}
			if cfg.Repo == "" {
				cfg.Repo = ref.Name.Context().RepositoryStr()
			}
			if cfg.Scheme == "" {
				cfg.Scheme = ref.Name.Context().Scheme()
			}
		default:
			return fmt.Errorf("%s: cannot mount a %s image lazily; convert it to an oci: layout or a registry", o.Image, ref.Transport)
		}
	default:
		return errors.New("nothing to mount: give an image or a bootstrap")
	}
	be, err := backend.New(cfg, backend.WithLogger(d.log))
	if err != nil {
		d.boot.Close()
		return fmt.Errorf("backend: %w", err)
	}
	d.be = &backendAdapter{remote: be}
	return nil
}

// persistBootstrap writes the verified bootstrap into the node cache as
// bootstraps/<manifest hex>, with the cache's modes (rafs/cache
// Cache.PutFile), and maps it.
func persistBootstrap(c *cache.Cache, manifestHex string, b *rafs.Bootstrap) (*rafs.Bootstrap, error) {
	final, err := c.PutFile("bootstraps", manifestHex, b.Bytes())
	if err != nil {
		return nil, err
	}
	// The bytes were verified against the manifest's digest a moment ago;
	// hashing them a third time would only add to mount-ready time.
	return rafs.Open(final, rafs.OpenOptions{SkipChecksum: true})
}

// prepareMountpoint checks the mountpoint: it must be a directory; a stale
// FUSE mount (its daemon died: ENOTCONN) is detached; a live mount is an
// error.
func prepareMountpoint(mp string, log *slog.Logger) (string, error) {
	abs, err := filepath.Abs(mp)
	if err != nil {
		return "", err
	}
	// statfs always reaches a FUSE daemon (stat may be answered from the
	// kernel's attribute cache), so it is what tells a dead one.
	var sfs unix.Statfs_t
	err = unix.Statfs(abs, &sfs)
	if errors.Is(err, syscall.ENOTCONN) || errors.Is(err, syscall.ECONNABORTED) {
		log.Warn("stale mount found (its daemon is gone); detaching it", "mountpoint", abs)
		if err := unix.Unmount(abs, unix.MNT_DETACH); err != nil {
			return "", fmt.Errorf("detach stale mount %s: %w", abs, err)
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(abs, &st); err != nil {
		return "", fmt.Errorf("mountpoint %s: %w", abs, err)
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		return "", fmt.Errorf("mountpoint %s is not a directory", abs)
	}
	mounted, err := IsMountpoint(abs)
	if err != nil {
		return "", err
	}
	if mounted {
		return "", fmt.Errorf("mountpoint %s: %w (run `damselfly umount %s` first)", abs, ErrAlreadyMounted, abs)
	}
	return abs, nil
}

// IsMountpoint reports whether dir (absolute, cleaned) is the mount
// point of a mount, from /proc/self/mountinfo.
func IsMountpoint(dir string) (bool, error) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return false, err
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && unescapeMountinfo(f[4]) == dir {
			return true, nil
		}
	}
	return false, nil
}

func unescapeMountinfo(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			var v byte
			ok := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					ok = false
					break
				}
				v = v*8 + byte(c-'0')
			}
			if ok {
				b.WriteByte(v)
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// Unmount unmounts mountpoint, the way `damselfly umount` does: a normal
// unmount, falling back to fusermount3 for unprivileged users.
func Unmount(mountpoint string) error {
	abs, err := filepath.Abs(mountpoint)
	if err != nil {
		return err
	}
	err = unix.Unmount(abs, 0)
	if err == nil || errors.Is(err, unix.EINVAL) && !mustBeMounted(abs) {
		return nil
	}
	if errors.Is(err, unix.EPERM) {
		return fusermountUnmount(abs)
	}
	return fmt.Errorf("unmount %s: %w", abs, err)
}

func mustBeMounted(dir string) bool {
	ok, _ := IsMountpoint(dir)
	return ok
}
