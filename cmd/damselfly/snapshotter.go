package main

import (
	"errors"
	"fmt"
	"net"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"damselfly/configs"
	"damselfly/fusemount/snapshotter"
	"damselfly/fusemount/snapshotter/cricreds"
)

func init() { daemonCommands = append(daemonCommands, newSnapshotter) }

func newSnapshotter(g *globals) *cobra.Command {
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "snapshotter",
		Short: "Run the containerd snapshotter that starts containers from RAFS images lazily; runs until SIGINT/SIGTERM",
		Long: `Snapshotter serves containerd's snapshots API on a unix socket (register it
under proxy_plugins in containerd's config; configs/containerd/config.toml).
Images pulled with the remote-snapshot labels (CRI with
disable_snapshot_annotations = false, or a client with
snapshotters.AppendInfoHandlerWrapper) whose manifest is RAFS are not
downloaded: the bootstrap is fetched and checked, and each container's rootfs
is an overlay over one lazy "damselfly mount" of the image per node. Other
images are ordinary overlayfs snapshots.

It prints "snapshotter <socket>" once it accepts connections, then serves until
SIGINT or SIGTERM. Mount daemons keep running after it exits, for the
containers that use them; the next start adopts them. Configuration
(--config) is documented in configs/snapshotter.yaml.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := configs.Load(g.configFile, "snapshotter", snapshotter.Default())
		if err != nil {
			return err
		}
		if printConfig {
			return configs.Print(cmd.OutOrStdout(), cfg.Redacted())
		}
		if err := configs.Validate(cfg); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		log, err := g.logger()
		if err != nil {
			return err
		}
		ctx := cmd.Context()
		opts := snapshotter.Options{Logger: log}
		var store *cricreds.Store
		var criSvc *cricreds.Service
		if cfg.CRI.Listen != "" {
			backend, conn, err := cricreds.Dial(cfg.CRI.ImageService)
			if err != nil {
				return err
			}
			defer conn.Close()
			store = cricreds.NewStore()
			criSvc = cricreds.NewService(store, backend, log.With("component", "cri"))
			opts.Credentials = store
		}
		sn, err := snapshotter.New(ctx, cfg, opts)
		if err != nil {
			return err
		}
		if store != nil {
			store.OnChange(sn.CredentialsChanged)
			defer store.OnChange(nil)
		}
		return serveSnapshotter(cmd, cfg, sn, criSvc)
	}
	return cmd
}

// serveSnapshotter serves sn (and, if not nil, the CRI ImageService cri)
// until the command's context is done, then closes sn.
func serveSnapshotter(cmd *cobra.Command, cfg snapshotter.Config, sn *snapshotter.Snapshotter, cri *cricreds.Service) error {
	ctx := cmd.Context()
	var criLn net.Listener
	if cri != nil {
		var err error
		if criLn, err = cricreds.Listen(cfg.CRI.Listen); err != nil {
			return errors.Join(fmt.Errorf("cri.listen: %w", err), sn.Close())
		}
		fmt.Fprintf(cmd.OutOrStdout(), "cri image service %s (forwarding to %s)\n", cfg.CRI.Listen, cfg.CRI.ImageService)
	}
	ln, err := snapshotter.Listen(cfg.Address)
	if err != nil {
		if criLn != nil {
			criLn.Close()
		}
		return errors.Join(err, sn.Close())
	}
	fmt.Fprintf(cmd.OutOrStdout(), "snapshotter %s\n", cfg.Address)
	eg, ctx := errgroup.WithContext(ctx)
	eg.Go(func() error { return snapshotter.Serve(ctx, sn, ln) })
	eg.Go(func() error { return sn.Run(ctx) })
	if cri != nil {
		eg.Go(func() error { return cricreds.Serve(ctx, cri, criLn) })
	}
	return errors.Join(eg.Wait(), sn.Close())
}
