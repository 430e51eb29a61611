package fusemount

import (
	"context"
	"errors"
	"os"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/rafs/erofs"
)

// kernelImageCheckEvery is how often a FUSE-served mount checks whether
// the node now holds every chunk of its image (a stat per chunk).
var kernelImageCheckEvery = 5 * time.Second

// openKernelImages opens the kernel image store when the config asks for
// one and this daemon can mount; nil otherwise.
func (d *Daemon) openKernelImages() *kernelImages {
	dir := d.opts.Config.kernelImagesDir()
	if dir == "" || d.cache == nil {
		return nil
	}
	if os.Geteuid() != 0 {
		d.log.Info("kernel images need root to mount; serving through FUSE")
		return nil
	}
	ki, err := openKernelImages(dir, d.opts.Config.KernelImage.Capacity, d.log)
	if err != nil {
		d.log.Warn("no kernel images: serving through FUSE", "err", err)
		return nil
	}
	return ki
}

// readyKernelImage returns the path of this image's kernel image: one
// written before, or one written now when the node already holds every
// chunk; "" when there is none yet.
func (d *Daemon) readyKernelImage(ctx context.Context, ki *kernelImages) string {
	name := kernelImageName(d.boot)
	if p := ki.find(name); p != "" {
		return p
	}
	if !allLocal(d.boot, d.cache) {
		return ""
	}
	p, err := d.buildKernelImage(ctx, ki, name)
	if err != nil {
		d.log.Warn("kernel image not written; serving through FUSE", "err", err)
		return ""
	}
	return p
}

func (d *Daemon) buildKernelImage(ctx context.Context, ki *kernelImages, name string) (string, error) {
	start := time.Now()
	im, err := erofs.Build(d.boot)
	if err != nil {
		return "", err
	}
	p, err := ki.build(ctx, name, im, d.fetcher)
	if err != nil {
		return "", err
	}
	d.log.Info("kernel image written", "image", d.image, "path", p, "bytes", im.Size(), "took", time.Since(start).Round(time.Millisecond))
	return p, nil
}

// buildWhenWhole runs beside a mount the daemon serves: once the node
// holds every chunk of the image, it writes the kernel image, so the
// next mount of the image is served by the kernel, and returns its path
// ("" on an error, logged, or when ctx ends first).
func (d *Daemon) buildWhenWhole(ctx context.Context, ki *kernelImages) string {
	name := kernelImageName(d.boot)
	t := time.NewTicker(kernelImageCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return ""
		case <-t.C:
		}
		if p := ki.find(name); p != "" {
			return p
		}
		if !allLocal(d.boot, d.cache) {
			continue
		}
		p, err := d.buildKernelImage(ctx, ki, name)
		if err != nil && ctx.Err() == nil {
			d.log.Warn("kernel image not written", "err", err)
		}
		return p
	}
}

func (d *Daemon) setKernelPath(p string) {
	d.kernelMu.Lock()
	d.kernelPath = p
	d.kernelMu.Unlock()
}

// kernelSource is where the kernel reads the mount from: "" while FUSE
// serves it.
func (d *Daemon) kernelSource() string {
	d.kernelMu.Lock()
	defer d.kernelMu.Unlock()
	return d.kernelPath
}

// serveKernel mounts the kernel image img at mp and waits until the
// mount is gone (unmounted by anyone) or ctx ends (then it unmounts).
// served is false, with nothing left mounted, when the kernel refused
// the image: the caller serves the mount through FUSE instead.
func (d *Daemon) serveKernel(ctx context.Context, mp, img string) (served bool, err error) {
	if err := unix.Mount(img, mp, "erofs", unix.MS_RDONLY|unix.MS_NOSUID|unix.MS_NODEV, ""); err != nil {
		d.log.Warn("the kernel did not mount the kernel image; serving through FUSE", "path", img, "err", err)
		return false, nil
	}
	d.setKernelPath(img)
	d.holdKernelMount(ctx, mp)
	return true, nil
}

// serveLazyKernel serves the mount as the kernel's EROFS over a loop
// device backed by this daemon (lazykernel.go) until it is gone or ctx
// ends. served is false, with nothing left mounted, when that could not
// be set up: the caller serves the mount through FUSE instead.
func (d *Daemon) serveLazyKernel(ctx context.Context, mp string, ki *kernelImages) (served bool, err error) {
	lk, err := d.startLazyKernel(mp)
	if err != nil {
		d.log.Warn("no lazy kernel mount; serving through FUSE", "err", err)
		return false, nil
	}
	d.setKernelPath(lk.loop)
	bctx, stopBuild := context.WithCancel(ctx)
	var build sync.WaitGroup
	build.Go(func() {
		p := d.buildWhenWhole(bctx, ki)
		if p == "" {
			return
		}
		// The same bytes, local now: the loop device reads the file and
		// the daemon leaves the path of every read.
		if err := lk.swapTo(p); err != nil {
			d.log.Warn("mount stays served by the daemon", "err", err)
			return
		}
		d.setKernelPath(p)
		d.log.Info("mount now reads the kernel image", "mountpoint", mp, "path", p)
	})
	d.holdKernelMount(ctx, mp)
	stopBuild()
	build.Wait()
	lk.close()
	return true, nil
}

// holdKernelMount reports the kernel mount at mp ready and waits until it
// is gone (unmounted by anyone) or ctx ends, then unmounts it.
func (d *Daemon) holdKernelMount(ctx context.Context, mp string) {
	d.state.set("running")
	d.log.Info("mounted", "image", d.image, "mountpoint", mp, "files", d.boot.InodeCount(), "served_by", "kernel",
		"from", d.kernelSource(), "ready_after", time.Since(d.started).Round(time.Millisecond))
	if d.opts.Ready != nil {
		d.opts.Ready(d)
	}
	gone := make(chan struct{})
	watchCtx, stopWatch := context.WithCancel(ctx)
	defer stopWatch()
	go func() {
		defer close(gone)
		waitUnmounted(watchCtx, mp)
	}()
	select {
	case <-gone:
	case <-ctx.Done():
	}
	if ctx.Err() == nil {
		d.log.Info("unmounted externally; exiting", "mountpoint", mp)
	} else {
		d.state.set("stopping")
		d.log.Info("signal received; unmounting", "mountpoint", mp)
		if err := unix.Unmount(mp, 0); err != nil && !errors.Is(err, unix.EINVAL) {
			d.log.Warn("unmount failed; detaching lazily", "mountpoint", mp, "err", err)
			if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
				d.log.Error("lazy unmount failed", "mountpoint", mp, "err", err)
			}
		}
	}
	stopWatch()
	<-gone
	d.state.set("stopped")
}

// waitUnmounted returns once mp is no longer a mount point, or ctx ends.
// The kernel flags /proc/self/mountinfo (POLLPRI) at every change of the
// mount table; a poll timeout bounds the wait for ctx.
func waitUnmounted(ctx context.Context, mp string) {
	f, err := os.Open("/proc/self/mountinfo")
	if err == nil {
		defer f.Close()
	}
	for ctx.Err() == nil {
		if ok, err := IsMountpoint(mp); err == nil && !ok {
			return
		}
		if f == nil {
			time.Sleep(200 * time.Millisecond)
			continue
		}
		fds := []unix.PollFd{{Fd: int32(f.Fd()), Events: unix.POLLPRI | unix.POLLERR}}
		if _, err := unix.Poll(fds, 200); err != nil && !errors.Is(err, unix.EINTR) {
			time.Sleep(200 * time.Millisecond)
		}
	}
}
