package main

import (
	schedd "damselfly/scheduler/daemon"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/peer/host"
)

func init() { daemonCommands = append(daemonCommands, newScheduler) }

// defaultSchedulerDir holds the scheduler's identity and cluster key.
const defaultSchedulerDir = "/var/lib/damselfly/scheduler"

func newScheduler(g *globals) *cobra.Command {
	var dir string
	var printConfig bool
	cmd := &cobra.Command{
		Use:   "scheduler",
		Short: "Run the scheduler daemon that coordinates peers; runs until SIGINT/SIGTERM",
		Long: `Scheduler runs the coordinator peers register with: it tracks which peers
hold which chunks, answers where each chunk should be fetched from, and lets
only a few peers fetch a chunk from the origin registry at a time.

It prints one line "listening <multiaddr>/p2p/<peer ID>" per listen address
(what peers put in their scheduler list) and one line "admin <URL>" for the
loopback admin API, then serves until SIGINT or SIGTERM.

Its identity and the cluster key live in --dir unless the configuration
(--config, documented in configs/scheduler.yaml) says otherwise. A missing
cluster key at the default path is created; copy it to every peer.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().StringVar(&dir, "dir", defaultSchedulerDir, "state directory: identity and cluster key")
	cmd.Flags().BoolVar(&printConfig, "print-config", false, "print the effective configuration and exit")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		cfg, err := configs.Load(g.configFile, "scheduler", schedd.Default(dir))
		if err != nil {
			return err
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
		if err := prepareSchedulerDir(dir, cfg, log); err != nil {
			return err
		}
		s, err := schedd.New(cfg, log)
		if err != nil {
			return err
		}
		ai := s.AddrInfo()
		for _, a := range ai.Addrs {
			fmt.Fprintf(cmd.OutOrStdout(), "listening %s/p2p/%s\n", a, ai.ID)
		}
		fmt.Fprintf(cmd.OutOrStdout(), "admin %s\n", s.AdminURL())
		return s.Run(cmd.Context())
	}
	return cmd
}

// prepareSchedulerDir creates the state directory (0700) when a key file
// lives in it, or makes an existing one 0700 if others may read it,
// saying so; and a new cluster key at the default path if there is none.
func prepareSchedulerDir(dir string, cfg schedd.Config, log *slog.Logger) error {
	inDir := func(p string) bool { return p != "" && filepath.Dir(p) == filepath.Clean(dir) }
	if inDir(cfg.Host.IdentityFile) || inDir(cfg.Host.ClusterKeyFile) {
		if err := host.PrepareStateDir(dir, log); err != nil {
			return err
		}
	}
	key := cfg.Host.ClusterKeyFile
	if cfg.Host.InsecureOpenCluster || key != host.Default(dir).ClusterKeyFile {
		return nil
	}
	if _, err := os.Stat(key); !errors.Is(err, fs.ErrNotExist) {
		return nil // present, or a problem host.New reports
	}
	if err := host.CreateClusterKeyFile(key); err != nil {
		return fmt.Errorf("create cluster key: %w", err)
	}
	log.Warn("created a new cluster key; copy it to every peer of this cluster", "path", key)
	return nil
}
