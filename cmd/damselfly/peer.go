package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"time"

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
	cmd.AddCommand(newPeerStatus(g))
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

func newPeerStatus(g *globals) *cobra.Command {
	var asJSON bool
	var endpoint string
	cmd := &cobra.Command{
		Use:   "status",
		Short: "Show a running peer's state: bytes by source, recent pulls, registries, schedulers, cache",
		Long: `Status asks the node's peer daemon (its HTTP endpoint, GET /status) for its
state: what it delivered from its cache, from peers and from the origin; the
last mirror requests and what served each; whether each origin registry
answers; its scheduler sessions; and its node cache. The endpoint is --url, or
proxy.listen of --config, or the default http://127.0.0.1:7950.`,
		Args: cobra.NoArgs,
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print the JSON as the peer serves it")
	cmd.Flags().StringVar(&endpoint, "url", "", "the peer's endpoint (default: from proxy.listen of the configuration)")
	cmd.RunE = func(cmd *cobra.Command, _ []string) error {
		if endpoint == "" {
			cfg, err := configs.Load(g.configFile, "peer", daemon.Default())
			if err != nil {
				return err
			}
			endpoint = "http://" + cfg.Proxy.Listen
		}
		ctx, cancel := context.WithTimeout(cmd.Context(), 10*time.Second)
		defer cancel()
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, strings.TrimSuffix(endpoint, "/")+"/status", nil)
		if err != nil {
			return err
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return fmt.Errorf("peer status: %w (is the peer running?)", err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		if err != nil {
			return fmt.Errorf("peer status: %w", err)
		}
		if resp.StatusCode != http.StatusOK {
			return fmt.Errorf("peer status: %s answered %s", endpoint, resp.Status)
		}
		if asJSON {
			_, err := cmd.OutOrStdout().Write(body)
			return err
		}
		var st daemon.Status
		if err := json.Unmarshal(body, &st); err != nil {
			return fmt.Errorf("peer status: %s sent no status: %w", endpoint, err)
		}
		printPeerStatus(cmd.OutOrStdout(), st)
		return nil
	}
	return cmd
}

func printPeerStatus(out io.Writer, st daemon.Status) {
	fmt.Fprintf(out, "peer         %s (up %s)\n", st.PeerID, time.Since(st.Started).Round(time.Second))
	for _, a := range st.Addrs {
		fmt.Fprintf(out, "listening    %s\n", a)
	}
	d := st.Delivered
	fmt.Fprintf(out, "delivered    cache %s (%d), peers %s (%d), origin %s (%d)\n",
		humanBytes(d.CacheBytes), d.CacheChunks, humanBytes(d.PeerBytes), d.PeerChunks, humanBytes(d.OriginBytes), d.OriginChunks)
	fmt.Fprintf(out, "             %d origin requests (%d without a turn), %d collapsed misses, %d hedges, %d bad peers, %d failed reads\n",
		d.OriginRequests, d.UnscheduledOrigin, d.Collapsed, d.Hedges, d.BadPeers, d.Failures)
	c := st.Cache
	capacity := "unlimited"
	if c.Capacity > 0 {
		capacity = humanBytes(c.Capacity)
	}
	fmt.Fprintf(out, "node cache   %s: %s in %d entries, capacity %s, %d evictions, %d errors\n",
		st.CacheDir, humanBytes(c.Bytes), c.Entries, capacity, c.Evictions, c.Errors)
	if len(st.Schedulers) == 0 {
		fmt.Fprintln(out, "schedulers   none: the peer works alone (cache, then origin)")
	}
	for _, s := range st.Schedulers {
		state := "down"
		switch {
		case s.Alive && s.Registered:
			state = "connected"
		case s.Alive:
			state = "not registered yet"
		}
		fmt.Fprintf(out, "scheduler    %s %s (%d heartbeats failed, %d sessions)\n", s.ID, state, s.Failures, s.Sessions)
	}
	for _, r := range st.Registries {
		if r.Failing {
			fmt.Fprintf(out, "registry     %s FAILING since %s: %s\n", r.Host, r.LastError.Format(time.RFC3339), r.Error)
		} else {
			fmt.Fprintf(out, "registry     %s answering (last %s ago)\n", r.Host, time.Since(r.LastAnswer).Round(time.Second))
		}
	}
	if len(st.Recent) > 0 {
		fmt.Fprintln(out, "recent pulls (newest first):")
	}
	for _, p := range st.Recent {
		ref := p.Ref
		if len(ref) > 19 && strings.HasPrefix(ref, "sha256:") {
			ref = ref[:19]
		}
		fmt.Fprintf(out, "  %s %-4s %s/%s %s %s %d %s from %s in %s\n", p.Time.Format("15:04:05"), p.Method, p.Registry, p.Repo,
			p.Kind, ref, p.Status, humanBytes(p.Bytes), p.Served, p.Duration.Round(time.Millisecond))
	}
}
