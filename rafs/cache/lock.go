package cache

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// lockDir takes an exclusive flock on p.lock, creating the directory and
// the file if they are missing, and returns the function that releases it.
// It blocks while another process (or another Cache in this one) holds the
// lock. flock, not fcntl, locks: they belong to the open file, so two
// Caches in one process exclude each other as two processes do, and the
// kernel drops them when a process dies.
//
// If the directory was deleted and recreated between the open and the
// lock, the locked file is no longer the one at p.lock, and a later locker
// would get a different file; lockDir checks for that and starts over.
//
// The directory and the file get pm's modes and group; a lock file with
// others is given them. A process that may only read the file (a reader
// in Config.Group) locks it opened read-only: flock does not care.
func lockDir(p paths, pm perm) (unlock func(), err error) {
	for {
		if err := pm.mkdirs(p.root); err != nil {
			return nil, fmt.Errorf("lock %s: %w", p.lock, err)
		}
		fd, err := unix.Open(p.lock, unix.O_RDWR|unix.O_CREAT|unix.O_CLOEXEC|unix.O_NOFOLLOW, uint32(pm.file))
		if err == unix.EACCES {
			fd, err = unix.Open(p.lock, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NOFOLLOW, 0)
		}
		if err != nil {
			return nil, fmt.Errorf("lock %s: %w", p.lock, err)
		}
		if err := flock(fd); err != nil {
			unix.Close(fd)
			return nil, fmt.Errorf("lock %s: %w", p.lock, err)
		}
		var held, named unix.Stat_t
		err = unix.Fstat(fd, &held)
		if err == nil {
			err = unix.Stat(p.lock, &named)
		}
		if err == nil && held.Dev == named.Dev && held.Ino == named.Ino {
			if pm.wrong(&held, pm.file) {
				// Best effort: the lock works whatever its mode.
				if pm.gid >= 0 {
					_ = unix.Fchown(fd, -1, pm.gid)
				}
				_ = unix.Fchmod(fd, uint32(pm.file))
			}
			return func() { unix.Close(fd) }, nil // closing drops the lock
		}
		unix.Close(fd)
		if err != nil && err != unix.ENOENT {
			return nil, fmt.Errorf("lock %s: %w", p.lock, err)
		}
	}
}

func flock(fd int) error {
	for {
		err := unix.Flock(fd, unix.LOCK_EX)
		if err != unix.EINTR {
			return err
		}
	}
}
