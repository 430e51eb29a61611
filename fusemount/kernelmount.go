package fusemount

import (
	"context"
	"errors"
	"os"
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

// buildWhenWhole runs beside a FUSE-served mount: once the node holds
// every chunk of the image, it writes the kernel image, so the next
// mount of the image is served by the kernel. It returns when done, on
// an error (logged) or when ctx ends.
func (d *Daemon) buildWhenWhole(ctx context.Context, ki *kernelImages) {
	name := kernelImageName(d.boot)
	t := time.NewTicker(kernelImageCheckEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if ki.find(name) != "" {
			return
		}
		if !allLocal(d.boot, d.cache) {
			continue
		}
		if _, err := d.buildKernelImage(ctx, ki, name); err != nil && ctx.Err() == nil {
			d.log.Warn("kernel image not written", "err", err)
		}
		return
	}
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
	d.kernelPath = img
	d.state.set("running")
	d.log.Info("mounted", "image", d.image, "mountpoint", mp, "files", d.boot.InodeCount(), "served_by", "kernel",
		"ready_after", time.Since(d.started).Round(time.Millisecond))
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
	return true, nil
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
