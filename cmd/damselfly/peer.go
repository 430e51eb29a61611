package main

import (
	"fmt"
	"os"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/peer/daemon"
	"damselfly/peer/host"
)

func init() { daemonCommands = append(daemonCommands, newPeer) }

func newPeer(g *globals) *cobra.Command {
	var dir string
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "peer",
		Short: "Run the peer daemon that serves chunks to this node and its peers; runs until SIGINT/SIGTERM",
		Long: `Peer runs the node daemon: it serves chunks of RAFS blobs to the node's mount
daemons and registry clients through its HTTP endpoint (an OCI registry mirror
plus a batch chunk API), getting each chunk from the node cache, other peers
(as the scheduler says) or the origin registry, in that order, and serves its
cache to the other peers of its cluster.

It prints one line "listening <multiaddr>/p2p/<peer ID>" per libp2p address and
one line "proxy <URL>" for the HTTP endpoint once they accept connections, then
serves until SIGINT or SIGTERM.

Its identity, cluster key and holdings live in --dir, and chunks in the node
cache shared with the mount daemons (/var/lib/damselfly/cache), unless the
configuration (--config, documented in configs/peer.yaml) says otherwise. The
cluster key is required: copy the scheduler's, or make one with
"damselfly peer keygen FILE".`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", "", "state directory: identity, cluster key, holdings (overrides the configuration's dir; default "+daemon.DefaultDir+")")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := configs.Load(g.configFile, "peer", daemon.Default())
		if err != nil {
			return err
		}
		if dir != "" {
			cfg.Dir = dir
		}
		if printConfig {
			return configs.Print(cmd.OutOrStdout(), cfg)
		}
		if err := configs.Validate(cfg); err != nil {
			return fmt.Errorf("config: %w", err)
		}
		log, err := g.logger()
		if err != nil {
			return err
		}
		d, err := daemon.New(cfg, log)
		if err != nil {
			return err
		}
		ai := d.AddrInfo()
		out := cmd.OutOrStdout()
		for _, a := range ai.Addrs {
			fmt.Fprintf(out, "listening %s/p2p/%s\n", a, ai.ID)
		}
		fmt.Fprintf(out, "proxy %s\n", d.ProxyURL())
		return d.Run(cmd.Context())
	}
	cmd.AddCommand(&cobra.Command{
		Use:   "keygen FILE",
		Short: "Write a new cluster key to FILE (mode 0600); copy it to every peer and scheduler",
		Args:  cobra.ExactArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			if err := host.CreateClusterKeyFile(args[0]); err != nil {
				return err
			}
			fmt.Fprintf(os.Stderr, "wrote cluster key %s\n", args[0])
			return nil
		},
	})
	return cmd
}
