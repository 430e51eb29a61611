package harness

import (
	"context"
	"errors"
	"fmt"
	"syscall"
	"time"

	"damselfly/fusemount"
)

// FUSESuperMagic and EROFSSuperMagic are statfs's f_type of a FUSE and
// an EROFS filesystem.
const (
	FUSESuperMagic  = 0x65735546
	EROFSSuperMagic = 0xE0F5E1E2
)

// IsImageMount reports whether dir is the root of a mount a damselfly
// mount daemon makes: FUSE, or EROFS for a kernel image.
func IsImageMount(dir string) bool {
	var sfs syscall.Statfs_t
	return syscall.Statfs(dir, &sfs) == nil && (sfs.Type == FUSESuperMagic || sfs.Type == EROFSSuperMagic)
}

// WaitMounted waits until dir, which the mount daemon p serves, is its
// mount (IsImageMount). It fails if p exits first, ctx ends or timeout
// passes.
func WaitMounted(ctx context.Context, p *Proc, dir string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for !IsImageMount(dir) {
		if p.Exited() {
			return fmt.Errorf("%s exited before mounting %s: %v:\n%s", p.Name(), dir, p.Err(), p.LogTail(3000))
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("%s: mount %s did not come up within %s", p.Name(), dir, timeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Unmount unmounts dir, which the mount daemon p serves, and waits for p
// to exit, as it must on its own when its mountpoint goes. If the
// unmount fails the mount is detached and p stopped; if p does not exit
// within its stop timeout it is stopped. Either is an error. p must not
// have exited before (the caller decides what that means).
func Unmount(p *Proc, dir string) error {
	if err := fusemount.Unmount(dir); err != nil {
		syscall.Unmount(dir, syscall.MNT_DETACH)
		return errors.Join(fmt.Errorf("unmount %s: %w", dir, err), p.Stop())
	}
	t := time.NewTimer(p.timeout)
	defer t.Stop()
	select {
	case <-p.Done():
		return nil
	case <-t.C:
		return errors.Join(fmt.Errorf("%s did not exit after its unmount", p.Name()), p.Stop())
	}
}
