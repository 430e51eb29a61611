package snapshotter

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/containerd/containerd/v2/core/mount"
	"github.com/containerd/containerd/v2/core/snapshots"
	"github.com/containerd/containerd/v2/core/snapshots/storage"
	"github.com/containerd/containerd/v2/plugins/snapshots/overlay"
	"github.com/containerd/containerd/v2/plugins/snapshots/overlay/overlayutils"
	"github.com/containerd/errdefs"
	"github.com/google/go-containerregistry/pkg/authn"

	"damselfly/rafs/transport"
)

// Snapshotter is containerd's overlayfs snapshotter with RAFS remote
// snapshots (see the package comment). It is safe for concurrent use.
type Snapshotter struct {
	snapshots.Snapshotter // containerd's overlayfs snapshotter over ms

	root     string
	ms       *storage.MetaStore
	reg      Registry
	daemons  *daemons
	log      *slog.Logger
	options  []string // overlay options the kernel needs here
	interval time.Duration

	// startOnPull is Config.Mount.StartOnPull; bg counts the daemon
	// starts it makes, which bgCtx cancels at Close.
	startOnPull time.Duration
	bg          sync.WaitGroup
	bgCtx       context.Context
	bgStop      context.CancelFunc

	// users is held shared while a snapshot on a RAFS image is created
	// or mounted (its daemon ensured, then the snapshot recorded), and
	// exclusively while the daemons in use are worked out and the others
	// stopped, so that no daemon is stopped under a snapshot being made.
	users sync.RWMutex

	siblings siblings   // RAFS siblings of original images (sibling.go)
	fillMu   sync.Mutex // held while a source layer is filled (fill.go)
}

var (
	_ snapshots.Snapshotter = (*Snapshotter)(nil)
	_ snapshots.Cleaner     = (*Snapshotter)(nil)
)

// Options are what New needs besides the Config.
type Options struct {
	// Registry reads manifests and bootstraps; nil means NewRegistry
	// over rafs/transport: credentials from the node's docker config (as
	// `damselfly mount docker://`), plain HTTP to loopback registries or,
	// with Config.Insecure, to all.
	Registry Registry
	Logger   *slog.Logger
	// Credentials, if set, are registry credentials clients handed over
	// with their pulls (cricreds.Store, from CRI's PullImage): the
	// default Registry tries them before the node's docker config, and
	// a mount daemon of an image they cover reads with them (a docker
	// config of its own, rewritten by CredentialsChanged).
	Credentials Credentials
}

// Credentials are registry credentials by repository.
type Credentials interface {
	// Keychain resolves a repository's credentials, anonymous if none.
	authn.Keychain
	// Lookup returns the credentials for image's repository (image as
	// HOST/REPO[:TAG|@DIGEST]), if any. Safe for concurrent use.
	Lookup(image string) (authn.AuthConfig, bool)
}

// New opens (or creates) the snapshotter's state under cfg.Root and
// adopts the mount daemons a previous run left: live ones are kept,
// dead ones' mounts detached, and daemons no snapshot uses stopped.
func New(ctx context.Context, cfg Config, opts Options) (*Snapshotter, error) {
	if err := cfg.Validate(); err != nil {
		return nil, fmt.Errorf("invalid snapshotter config:\n%w", err)
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	if opts.Registry == nil {
		topts := transport.Options{Insecure: cfg.Insecure, UserAgent: "damselfly-snapshotter"}
		if opts.Credentials != nil {
			topts.Keychain = authn.NewMultiKeychain(opts.Credentials, authn.DefaultKeychain)
		}
		opts.Registry = NewRegistry(topts, cfg.MaxBootstrapBytes)
	}
	if err := os.MkdirAll(cfg.Root, 0o700); err != nil {
		return nil, err
	}
	ms, err := storage.NewMetaStore(filepath.Join(cfg.Root, "metadata.db"))
	if err != nil {
		return nil, fmt.Errorf("snapshot metadata: %w", err)
	}
	inner, err := overlay.NewSnapshotter(cfg.Root, overlay.WithMetaStore(ms))
	if err != nil {
		ms.Close()
		return nil, err
	}
	s := &Snapshotter{Snapshotter: inner, root: cfg.Root, ms: ms, reg: opts.Registry,
		daemons: newDaemons(cfg, opts.Credentials, opts.Logger), log: opts.Logger, interval: cfg.CheckInterval,
		startOnPull: cfg.Mount.StartOnPull}
	s.bgCtx, s.bgStop = context.WithCancel(context.WithoutCancel(ctx))
	// The options containerd's overlayfs snapshotter adds to its own
	// overlay mounts, for the ones this one makes.
	if userxattr, err := overlayutils.NeedsUserXAttr(cfg.Root); err == nil && userxattr {
		s.options = append(s.options, "userxattr")
	}
	if _, err := os.Stat("/sys/module/overlay/parameters/index"); err == nil {
		s.options = append(s.options, "index=off")
	}
	if err := s.daemons.adopt(ctx); err != nil {
		inner.Close()
		return nil, fmt.Errorf("adopt mount daemons: %w", err)
	}
	if err := s.syncDaemons(ctx, false); err != nil {
		s.log.Warn("stopping unused mount daemons", "err", err)
	}
	return s, nil
}

// Run checks the mount daemons in use every CheckInterval, replacing
// one that died at its mountpoint, until ctx is done. It returns nil
// then: the daemons keep serving the containers that use them.
func (s *Snapshotter) Run(ctx context.Context) error {
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		if err := s.syncDaemons(ctx, true); err != nil && ctx.Err() == nil {
			s.log.Warn("mount daemons", "err", err)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// CredentialsChanged rewrites the docker config of every mount daemon
// of an image in repo (HOST/REPO) from Options.Credentials; they read
// it at their next registry authentication. cricreds.Store.OnChange
// calls it.
func (s *Snapshotter) CredentialsChanged(repo string) { s.daemons.credentialsChanged(repo) }

// Daemons returns the pids of the running mount daemons by manifest
// digest.
func (s *Snapshotter) Daemons() map[string]int { return s.daemons.running() }

// Prepare creates an active snapshot. With the remote-snapshot labels
// for a layer of a RAFS image it instead commits the layer's snapshot
// itself (a bootstrap only once it is fetched and verified) and returns
// an error wrapping errdefs.ErrAlreadyExists, so containerd does not
// download the layer.
func (s *Snapshotter) Prepare(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	var base snapshots.Info
	for _, o := range opts {
		if err := o(&base); err != nil {
			return nil, err
		}
	}
	r, remote, err := parseRemote(base.Labels)
	if err != nil {
		return nil, fmt.Errorf("prepare %s: %w: %w", key, errdefs.ErrInvalidArgument, err)
	}
	if remote {
		kind, err := s.classify(ctx, r)
		if err != nil {
			return nil, err
		}
		if kind != "" {
			return nil, s.commitRemote(ctx, key, parent, r, kind, base.Labels)
		}
		if sib := s.sibling(ctx, r); sib != nil {
			if done, err := s.commitSibling(ctx, key, parent, r, sib, base.Labels); done {
				return nil, err
			}
		}
	}
	alt := ""
	if remote {
		alt = r.image()
	}
	return s.create(ctx, snapshots.KindActive, key, parent, alt, opts)
}

// View creates a read-only snapshot of parent.
func (s *Snapshotter) View(ctx context.Context, key, parent string, opts ...snapshots.Opt) ([]mount.Mount, error) {
	return s.create(ctx, snapshots.KindView, key, parent, "", opts)
}

// classify returns what layer r is (layerKind). A manifest it cannot read
// makes the layer an ordinary one, for containerd to download: the pull
// may carry credentials the node's docker config does not have.
func (s *Snapshotter) classify(ctx context.Context, r remoteLayer) (string, error) {
	m, err := s.reg.Manifest(ctx, r.image())
	if err != nil {
		s.log.Warn("cannot read the manifest of a layer; containerd pulls it in full", "image", r.image(), "layer", r.layer, "err", err)
		return "", nil
	}
	kind, err := layerKind(m, r.layer)
	if err != nil {
		return "", fmt.Errorf("layer %s of %s: %w", r.layer, r.image(), err)
	}
	return kind, nil
}

// create makes an active or view snapshot; on a RAFS image, with the
// image's daemon running and the image's mount as its lowest layer.
// Empty source layers it would mount are filled first (fill.go), also
// from alt, the image being unpacked, if not "".
func (s *Snapshotter) create(ctx context.Context, kind snapshots.Kind, key, parent, alt string, opts []snapshots.Opt) ([]mount.Mount, error) {
	onRAFS := false
	var manifest, image string
	if parent != "" {
		chain, err := s.chain(ctx, parent)
		if err != nil {
			return nil, err
		}
		// A chain another image's layers share may hold empty source
		// layers that this snapshot would mount.
		if err := s.fillSources(ctx, chain, alt); err != nil {
			return nil, fmt.Errorf("snapshot %s: %w", key, err)
		}
		manifest, image, _, onRAFS = rafsImage(chain)
		if onRAFS {
			if err := s.startDaemon(ctx, manifest, image); err != nil {
				return nil, fmt.Errorf("snapshot %s: %w", key, err)
			}
			s.users.RLock()
			defer s.users.RUnlock()
		}
	}
	var err error
	if kind == snapshots.KindView {
		_, err = s.Snapshotter.View(ctx, key, parent, opts...)
	} else {
		_, err = s.Snapshotter.Prepare(ctx, key, parent, opts...)
	}
	if err != nil {
		return nil, err
	}
	if !onRAFS {
		return s.Snapshotter.Mounts(ctx, key)
	}
	m, err := s.rafsMounts(ctx, key)
	if err != nil {
		// The snapshot is of no use without its lower layer.
		if rerr := s.Snapshotter.Remove(ctx, key); rerr != nil {
			s.log.Warn("remove a snapshot whose image could not be mounted", "key", key, "err", rerr)
		}
		return nil, err
	}
	s.inUseNow(manifest, image)
	return m, nil
}

// Mounts returns the mounts of an active or view snapshot; on a RAFS
// image, starting its daemon again if it is not running.
func (s *Snapshotter) Mounts(ctx context.Context, key string) ([]mount.Mount, error) {
	chain, err := s.chain(ctx, key)
	if err != nil {
		return nil, err
	}
	manifest, image, _, ok := rafsImage(chain[1:])
	if !ok {
		return s.Snapshotter.Mounts(ctx, key)
	}
	if err := s.startDaemon(ctx, manifest, image); err != nil {
		return nil, fmt.Errorf("snapshot %s: %w", key, err)
	}
	s.users.RLock()
	defer s.users.RUnlock()
	m, err := s.rafsMounts(ctx, key)
	if err == nil {
		s.inUseNow(manifest, image)
	}
	return m, err
}

// startGrace is how long a daemon started for a snapshot is kept before
// the snapshot is recorded (startDaemon).
const startGrace = time.Minute

// inUseNow ends the grace startDaemon gave the image's daemon, and the time
// a pull kept it for (StartOnPull): from now on it lives while snapshots
// stand on it.
func (s *Snapshotter) inUseNow(manifest, image string) {
	s.daemons.keepUntil(manifest, image+"@"+manifest, time.Time{})
}

// startDaemon starts the image's daemon if it is not running, before
// s.users is taken: a start can take as long as the bootstrap's fetch,
// and a waiting syncDaemons would hold up every snapshot on a RAFS image
// meanwhile. Under s.users, rafsMounts then finds it running (or starts
// it again if it was stopped in between).
//
// Until the snapshot that needs it is recorded, the daemon is kept
// (startGrace) whether or not snapshots use it yet: a sync between this
// start and that record would otherwise stop it, and rafsMounts start
// it again. The caller ends the grace with inUse once the snapshot is
// recorded.
func (s *Snapshotter) startDaemon(ctx context.Context, manifest, image string) error {
	s.daemons.keepUntil(manifest, image+"@"+manifest, time.Now().Add(startGrace))
	if _, err := s.daemons.ensure(ctx, manifest, image+"@"+manifest); err != nil {
		return fmt.Errorf("mount RAFS image %s: %w", image, err)
	}
	return nil
}

// rafsMounts ensures the daemon of the RAFS image key stands on and
// returns key's overlay over its mount. s.users held shared.
func (s *Snapshotter) rafsMounts(ctx context.Context, key string) ([]mount.Mount, error) {
	var snap storage.Snapshot
	var chain []link
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		if snap, err = storage.GetSnapshot(ctx, key); err != nil {
			return err
		}
		chain, err = chainIn(ctx, key)
		return err
	})
	if err != nil {
		return nil, err
	}
	manifest, image, at, ok := rafsImage(chain[1:])
	if !ok {
		return nil, fmt.Errorf("snapshot %s does not stand on a RAFS image", key)
	}
	mp, err := s.daemons.ensure(ctx, manifest, image+"@"+manifest)
	if err != nil {
		return nil, fmt.Errorf("mount RAFS image %s for snapshot %s: %w", image, key, err)
	}
	lowers := lowerDirs(chain[1:], at, s.upperDir, mp)
	return overlayMounts(snap.Kind, s.upperDir(snap.ID), s.workDir(snap.ID), lowers, s.options)
}

// The directories of containerd's overlayfs snapshotter under root.
func (s *Snapshotter) upperDir(id string) string {
	return filepath.Join(s.root, "snapshots", id, "fs")
}
func (s *Snapshotter) workDir(id string) string {
	return filepath.Join(s.root, "snapshots", id, "work")
}

// chain returns key and its parents, nearest first.
func (s *Snapshotter) chain(ctx context.Context, key string) ([]link, error) {
	var chain []link
	err := s.ms.WithTransaction(ctx, false, func(ctx context.Context) error {
		var err error
		chain, err = chainIn(ctx, key)
		return err
	})
	return chain, err
}

// maxChain bounds a parent chain: containerd's images have at most a
// few hundred layers; a longer chain is a loop in damaged metadata.
const maxChain = 4096

func chainIn(ctx context.Context, key string) ([]link, error) {
	var chain []link
	for name := key; name != ""; {
		if len(chain) == maxChain {
			return nil, fmt.Errorf("snapshot %s: parent chain longer than %d", key, maxChain)
		}
		id, info, _, err := storage.GetInfo(ctx, name)
		if err != nil {
			return nil, err
		}
		chain = append(chain, link{name: name, id: id, labels: info.Labels})
		name = info.Parent
	}
	return chain, nil
}

// Remove removes a snapshot, then stops the mount daemons no snapshot
// uses any more.
func (s *Snapshotter) Remove(ctx context.Context, key string) error {
	if err := s.Snapshotter.Remove(ctx, key); err != nil {
		return err
	}
	if err := s.syncDaemons(ctx, false); err != nil {
		s.log.Warn("stopping unused mount daemons", "err", err)
	}
	return nil
}

// Cleanup removes the directories of removed snapshots.
func (s *Snapshotter) Cleanup(ctx context.Context) error {
	if c, ok := s.Snapshotter.(snapshots.Cleaner); ok {
		return c.Cleanup(ctx)
	}
	return nil
}

// syncDaemons stops the daemons of images no active or view snapshot
// stands on (unless kept for a first container after a pull), and with restart starts the ones in use that are not
// running. Restarts happen outside s.users: a daemon that takes long to
// come up (or fails to) must not hold up snapshots of other images.
func (s *Snapshotter) syncDaemons(ctx context.Context, restart bool) error {
	s.users.Lock()
	inUse, err := s.inUse(ctx)
	if err == nil {
		err = s.daemons.stopUnused(inUse)
	}
	s.users.Unlock()
	if err != nil || !restart {
		return err
	}
	return s.daemons.restart(ctx, inUse)
}

// inUse returns the RAFS images (manifest -> docker://HOST/REPO@digest)
// that active and view snapshots stand on.
func (s *Snapshotter) inUse(ctx context.Context) (map[string]string, error) {
	byName := map[string]snapshots.Info{}
	err := s.Snapshotter.Walk(ctx, func(_ context.Context, info snapshots.Info) error {
		byName[info.Name] = info
		return nil
	})
	// A store that never held a snapshot has no bucket yet: none in use.
	if err != nil && !errdefs.IsNotFound(err) {
		return nil, err
	}
	out := map[string]string{}
	for _, info := range byName {
		if info.Kind == snapshots.KindCommitted {
			continue
		}
		p, ok := byName[info.Parent]
		for n := 0; ok && n < maxChain; n++ {
			if p.Labels[LabelLayer] == layerBootstrap {
				m := p.Labels[LabelManifest]
				out[m] = p.Labels[LabelImage] + "@" + m
				break
			}
			p, ok = byName[p.Parent]
		}
	}
	return out, nil
}

// Close closes the metadata store. The mount daemons keep running, for
// the containers that use them and the next snapshotter to adopt.
func (s *Snapshotter) Close() error {
	s.bgStop()
	s.bg.Wait()
	return s.Snapshotter.Close()
}
