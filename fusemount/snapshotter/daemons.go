package snapshotter

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"damselfly/fusemount"
)

// daemonState is what mounts/<id>/daemon.json records of a mount daemon,
// so that a restarted snapshotter finds it again.
type daemonState struct {
	Manifest string    `json:"manifest"` // sha256:...
	Image    string    `json:"image"`    // docker://HOST/REPO@sha256:...
	PID      int       `json:"pid"`
	Started  time.Time `json:"started"`
}

// daemon is one image's mount daemon. mu is held while it is checked,
// started or stopped, so that one image never gets two.
type daemon struct {
	id    string
	mu    sync.Mutex
	state daemonState
	// done is closed when a daemon this process started exits (the
	// process is reaped); nil for one adopted after a restart, which is
	// checked by its pid and status socket instead.
	done <-chan struct{}
	// failed is when its last start failed.
	failed time.Time
	// kept is how long a daemon started at pull is kept with no
	// snapshot on it (Config.Mount.StartOnPull); guarded by daemons.mu.
	kept time.Time
}

// daemons runs one `damselfly mount` per image under root/mounts. Its
// methods are safe for concurrent use.
type daemons struct {
	root  string // root/mounts
	cfg   Config
	creds Credentials // nil: the node's docker config only
	log   *slog.Logger
	// command builds the daemon's command line; tests replace it.
	command func(st daemonState, mountpoint, socket string) (*exec.Cmd, error)

	mu sync.Mutex
	m  map[string]*daemon // by id
}

func newDaemons(cfg Config, creds Credentials, log *slog.Logger) *daemons {
	d := &daemons{root: filepath.Join(cfg.Root, "mounts"), cfg: cfg, creds: creds, log: log, m: map[string]*daemon{}}
	d.command = d.mountCommand
	return d
}

// daemonID names an image's directory: 16 hex digits of its manifest
// digest keep the status socket's path short (a unix socket path is at
// most 107 bytes); daemon.json holds the full digest, which is checked.
func daemonID(manifest string) string {
	_, hex, _ := strings.Cut(manifest, ":")
	if len(hex) > 16 {
		hex = hex[:16]
	}
	return hex
}

func daemonDir(root, id string) string { return filepath.Join(root, "mounts", id) }

// daemonSocket is the status socket of the daemon with id under root.
func daemonSocket(root, id string) string { return filepath.Join(daemonDir(root, id), "api.sock") }

func (p *daemons) dir(id string) string        { return filepath.Join(p.root, id) }
func (p *daemons) mountpoint(id string) string { return filepath.Join(p.root, id, "mnt") }
func (p *daemons) socket(id string) string     { return filepath.Join(p.root, id, "api.sock") }

// mountCommand is `damselfly [--config FILE] mount IMAGE MOUNTPOINT`,
// with the status socket and the peer set by environment (configs: any
// key can be), and no other DAMSELFLY_ variable of the snapshotter's
// own environment, which configures the snapshotter, not its mounts.
func (p *daemons) mountCommand(st daemonState, mp, sock string) (*exec.Cmd, error) {
	bin := p.cfg.Mount.Binary
	if bin == "" {
		var err error
		if bin, err = os.Executable(); err != nil {
			return nil, fmt.Errorf("find the damselfly binary: %w", err)
		}
	}
	var args []string
	if p.cfg.Mount.Config != "" {
		args = append(args, "--config", p.cfg.Mount.Config)
	}
	args = append(args, "mount")
	if p.cfg.Insecure {
		args = append(args, "--insecure")
	}
	args = append(args, st.Image, mp)
	cmd := exec.Command(bin, args...)
	dockerConfig, err := p.writeCredentials(daemonID(st.Manifest), st.Image)
	if err != nil {
		return nil, err
	}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DAMSELFLY_") && (dockerConfig == "" || !strings.HasPrefix(kv, "DOCKER_CONFIG=")) {
			cmd.Env = append(cmd.Env, kv)
		}
	}
	if dockerConfig != "" {
		cmd.Env = append(cmd.Env, "DOCKER_CONFIG="+dockerConfig)
	}
	cmd.Env = append(cmd.Env, "DAMSELFLY_API_SOCKET="+sock)
	if p.cfg.Mount.Peer != "" {
		cmd.Env = append(cmd.Env, "DAMSELFLY_BACKEND_PROXY_URL="+p.cfg.Mount.Peer)
	}
	return cmd, nil
}

// get returns the daemon entry of manifest, creating it.
func (p *daemons) get(manifest, image string) *daemon {
	id := daemonID(manifest)
	p.mu.Lock()
	defer p.mu.Unlock()
	d, ok := p.m[id]
	if !ok {
		d = &daemon{id: id, state: daemonState{Manifest: manifest, Image: image}}
		p.m[id] = d
	}
	return d
}

// keepUntil sets until when the daemon of manifest is kept with no
// snapshot using it (the zero time: only while snapshots use it). A
// later time never gives way to an earlier one except the zero time.
// It reports whether the entry was not kept before, i.e. whether this
// caller should start it.
func (p *daemons) keepUntil(manifest, image string, until time.Time) bool {
	d := p.get(manifest, image)
	p.mu.Lock()
	defer p.mu.Unlock()
	was := d.kept
	if until.IsZero() || until.After(d.kept) {
		d.kept = until
	}
	return !until.IsZero() && !was.After(time.Now())
}

// ensure returns the mountpoint of the image's running daemon, starting
// one (or replacing one that died) if needed.
func (p *daemons) ensure(ctx context.Context, manifest, image string) (string, error) {
	d := p.get(manifest, image)
	d.mu.Lock()
	defer func() { d.mu.Unlock() }() // d may change below
	// stop removes an entry while holding its lock: one removed while
	// this waited for the lock is done with; start on a new entry.
	for {
		p.mu.Lock()
		cur := p.m[d.id]
		p.mu.Unlock()
		if cur == d {
			break
		}
		d.mu.Unlock()
		d = p.get(manifest, image)
		d.mu.Lock()
	}
	if d.state.Manifest != manifest {
		return "", fmt.Errorf("mount daemon %s serves %s, not %s: two manifests share the first 64 bits of their digests", d.id, d.state.Manifest, manifest)
	}
	if p.alive(ctx, d) {
		return p.mountpoint(d.id), nil
	}
	if d.state.PID != 0 {
		p.log.Warn("mount daemon is gone; starting a new one at its mountpoint", "image", d.state.Image, "pid", d.state.PID)
	}
	d.state.Image = image
	if err := p.start(ctx, d); err != nil {
		d.failed = time.Now()
		return "", err
	}
	d.failed = time.Time{}
	return p.mountpoint(d.id), nil
}

// statusTimeout bounds one question to a daemon's status socket.
const statusTimeout = 2 * time.Second

// alive reports whether d's daemon runs and serves its mount. d.mu held.
func (p *daemons) alive(ctx context.Context, d *daemon) bool {
	if d.state.PID == 0 || !pidAlive(d.state.PID) {
		return false
	}
	if d.done != nil {
		select {
		case <-d.done:
			return false
		default:
		}
	}
	ctx, cancel := context.WithTimeout(ctx, statusTimeout)
	defer cancel()
	st, err := fusemount.QueryStatus(ctx, p.mountpoint(d.id), p.socket(d.id))
	return err == nil && st.PID == d.state.PID && st.State == "running"
}

// start starts d's daemon and waits until it serves its mount. d.mu held.
func (p *daemons) start(ctx context.Context, d *daemon) error {
	mp, sock := p.mountpoint(d.id), p.socket(d.id)
	p.reap(d)
	if err := os.MkdirAll(mp, 0o755); err != nil {
		return fmt.Errorf("mount daemon directory: %w", err)
	}
	logPath := filepath.Join(p.dir(d.id), "mount.log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("mount daemon log: %w", err)
	}
	defer logFile.Close()
	logStart, _ := logFile.Seek(0, io.SeekEnd)
	cmd, err := p.command(d.state, mp, sock)
	if err != nil {
		return err
	}
	// Its own session: the daemon outlives the snapshotter (a restart, a
	// SIGKILL), and a signal to the snapshotter's process group does not
	// reach it. Its output goes to its log, never to a pipe that would
	// break when the snapshotter goes.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, logFile, logFile
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("start mount daemon for %s: %w", d.state.Image, err)
	}
	done := make(chan struct{})
	go func() {
		cmd.Wait()
		close(done)
	}()
	d.done = done
	d.state.PID = cmd.Process.Pid
	d.state.Started = time.Now().UTC()
	if err := writeState(filepath.Join(p.dir(d.id), "daemon.json"), d.state); err != nil {
		p.kill(d)
		return err
	}
	p.log.Info("mount daemon started", "image", d.state.Image, "pid", d.state.PID, "mountpoint", mp)

	wait := time.NewTimer(p.cfg.MountTimeout)
	defer wait.Stop()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-done:
			return fmt.Errorf("mount daemon for %s exited before it served its mount: %s", d.state.Image, logTail(logPath, logStart))
		case <-ctx.Done():
			p.kill(d)
			return ctx.Err()
		case <-wait.C:
			p.kill(d)
			return fmt.Errorf("mount daemon for %s did not serve its mount within %v: %s", d.state.Image, p.cfg.MountTimeout, logTail(logPath, logStart))
		case <-tick.C:
			qctx, cancel := context.WithTimeout(ctx, statusTimeout)
			st, err := fusemount.QueryStatus(qctx, mp, sock)
			cancel()
			if err == nil && st.State == "running" {
				return nil
			}
		}
	}
}

// reap clears what a dead daemon of d left: its process, if it is still
// around and owns the mountpoint, and its mount, detached lazily so that
// containers still holding it keep what they have. d.mu held.
func (p *daemons) reap(d *daemon) {
	mp := p.mountpoint(d.id)
	if d.state.PID != 0 && pidAlive(d.state.PID) && ownsMount(d.state.PID, mp) {
		syscall.Kill(d.state.PID, syscall.SIGKILL)
	}
	if mounted(mp) {
		if err := unix.Unmount(mp, unix.MNT_DETACH); err != nil {
			p.log.Warn("detach dead mount", "mountpoint", mp, "err", err)
		}
	}
}

// kill stops d's daemon at once and detaches its mount. d.mu held.
func (p *daemons) kill(d *daemon) {
	if d.state.PID != 0 && pidAlive(d.state.PID) && ownsMount(d.state.PID, p.mountpoint(d.id)) {
		syscall.Kill(d.state.PID, syscall.SIGKILL)
	}
	p.waitExit(d, p.cfg.StopTimeout)
	p.reap(d)
}

// waitExit waits up to timeout for d's process to exit.
func (p *daemons) waitExit(d *daemon, timeout time.Duration) bool {
	deadline := time.Now().Add(timeout)
	for d.state.PID != 0 && pidAlive(d.state.PID) {
		if time.Now().After(deadline) {
			return false
		}
		if d.done != nil {
			select {
			case <-d.done:
				return true
			case <-time.After(20 * time.Millisecond):
			}
			continue
		}
		time.Sleep(20 * time.Millisecond)
	}
	return true
}

// stop stops the daemon with id: SIGTERM (it unmounts and exits), the
// kill after StopTimeout, then its mount detached if still there and
// its directory removed.
func (p *daemons) stop(id string) error {
	p.mu.Lock()
	d, ok := p.m[id]
	p.mu.Unlock()
	if !ok {
		return nil
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	mp := p.mountpoint(id)
	if d.state.PID != 0 && pidAlive(d.state.PID) && ownsMount(d.state.PID, mp) {
		syscall.Kill(d.state.PID, syscall.SIGTERM)
		if !p.waitExit(d, p.cfg.StopTimeout) {
			p.log.Warn("mount daemon did not exit after SIGTERM; killing it", "pid", d.state.PID, "mountpoint", mp)
			p.kill(d)
		}
	}
	p.reap(d)
	p.log.Info("mount daemon stopped", "image", d.state.Image, "pid", d.state.PID)
	p.mu.Lock()
	delete(p.m, id)
	p.mu.Unlock()
	if mounted(mp) {
		return fmt.Errorf("mountpoint %s is still mounted; its directory is kept", mp)
	}
	return os.RemoveAll(p.dir(id))
}

// adopt loads the daemons a previous snapshotter started from their
// daemon.json files. A live one is kept as it is; a dead one is cleared
// (its mount detached) and left for sync to restart if it is in use.
func (p *daemons) adopt(ctx context.Context) error {
	entries, err := os.ReadDir(p.root)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		id := e.Name()
		st, err := readState(filepath.Join(p.dir(id), "daemon.json"))
		if err != nil || daemonID(st.Manifest) != id {
			p.log.Warn("mount daemon directory without a valid daemon.json; clearing it", "dir", p.dir(id), "err", err)
			d := &daemon{id: id}
			p.reap(d)
			if !mounted(p.mountpoint(id)) {
				os.RemoveAll(p.dir(id))
			}
			continue
		}
		d := &daemon{id: id, state: st}
		d.mu.Lock()
		if p.alive(ctx, d) {
			p.log.Info("adopted a running mount daemon", "image", st.Image, "pid", st.PID)
		} else {
			p.log.Warn("mount daemon found dead; clearing its mount", "image", st.Image, "pid", st.PID)
			p.reap(d)
		}
		d.mu.Unlock()
		p.mu.Lock()
		p.m[id] = d
		p.mu.Unlock()
	}
	return nil
}

// stopUnused stops the daemons not in inUse (manifest -> image) and
// returns every failure.
func (p *daemons) stopUnused(inUse map[string]string) error {
	want := map[string]bool{}
	for m := range inUse {
		want[daemonID(m)] = true
	}
	p.mu.Lock()
	var unused []string
	now := time.Now()
	for id, d := range p.m {
		if !want[id] && !d.kept.After(now) {
			unused = append(unused, id)
		}
	}
	p.mu.Unlock()
	var errs []error
	for _, id := range unused {
		if err := p.stop(id); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// retryAfterFailure is how long the periodic check leaves a daemon that
// failed to start before it tries again; a snapshot that needs the
// image (Prepare, Mounts) tries at once.
const retryAfterFailure = 30 * time.Second

// restart starts the daemons of inUse that are not running, except
// those that failed to start within retryAfterFailure.
func (p *daemons) restart(ctx context.Context, inUse map[string]string) error {
	var errs []error
	for m, image := range inUse {
		d := p.get(m, image)
		d.mu.Lock()
		recent := time.Since(d.failed) < retryAfterFailure
		d.mu.Unlock()
		if recent {
			continue
		}
		if _, err := p.ensure(ctx, m, image); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

// running returns the pids of the daemons, by manifest, as last known.
func (p *daemons) running() map[string]int {
	p.mu.Lock()
	ds := make([]*daemon, 0, len(p.m))
	for _, d := range p.m {
		ds = append(ds, d)
	}
	p.mu.Unlock()
	out := map[string]int{}
	for _, d := range ds {
		d.mu.Lock()
		if d.state.PID != 0 && pidAlive(d.state.PID) {
			out[d.state.Manifest] = d.state.PID
		}
		d.mu.Unlock()
	}
	return out
}
