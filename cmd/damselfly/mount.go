package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/spf13/cobra"

	"damselfly/configs"
	"damselfly/fusemount"
)

func newMount(g *globals) *cobra.Command {
	var bootstrap, blobDir, platform string
	var insecure, printConfig bool
	cmd := &cobra.Command{
		Use:   "mount IMAGE MOUNTPOINT | mount --bootstrap FILE MOUNTPOINT",
		Short: "Mount a RAFS image read-only with FUSE, fetching chunks on demand; runs until unmounted",
		Long: `Mount resolves IMAGE (oci:PATH[:TAG] or docker://HOST/REPO:TAG), fetches and
verifies its bootstrap, mounts the whole image at MOUNTPOINT and serves it in
the foreground. File contents are fetched when read: from memory, the node
cache, the node's peer (backend.proxy) or the registry. The daemon exits when
the mountpoint is unmounted by anyone, and unmounts on SIGTERM/SIGINT.
Configuration (--config, nydusd-shaped) is documented in configs/mount.yaml.`,
		Args: unlessPrintConfig(cobra.RangeArgs(1, 2)),
	}
	f := cmd.Flags()
	f.StringVar(&bootstrap, "bootstrap", "", "mount a local bootstrap file instead of an image")
	f.StringVar(&blobDir, "blob-dir", "", "blobs of --bootstrap (default: its directory) when no backend is configured")
	f.StringVar(&platform, "platform", "", "os/arch[/variant] to pick from a multi-platform image")
	f.BoolVar(&insecure, "insecure", false, "plain HTTP to registries (automatic for loopback)")
	f.BoolVar(&printConfig, "print-config", false, "print the effective configuration and exit")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		cfg, err := configs.Load(g.configFile, "mount", fusemount.DefaultConfig())
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
		opts := fusemount.Options{Config: cfg, Logger: log, Version: version}
		switch {
		case bootstrap != "" && len(args) == 1:
			opts.Bootstrap, opts.BlobDir, opts.Mountpoint = bootstrap, blobDir, args[0]
		case bootstrap == "" && len(args) == 2:
			opts.Image, opts.Mountpoint = args[0], args[1]
		default:
			return errors.New("usage: damselfly mount IMAGE MOUNTPOINT, or damselfly mount --bootstrap FILE MOUNTPOINT")
		}
		l, err := configs.New("", "mount")
		if err != nil {
			return err
		}
		if err := l.BindFlags(cmd.Flags()); err != nil {
			return err
		}
		if opts.Transport, err = transportOptions(l); err != nil {
			return err
		}
		return fusemount.Run(cmd.Context(), opts)
	}
	return cmd
}

func newUmount(g *globals) *cobra.Command {
	var wait time.Duration
	cmd := &cobra.Command{
		Use:   "umount MOUNTPOINT",
		Short: "Unmount a damselfly mount; its daemon then exits",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().DurationVar(&wait, "wait", 10*time.Second, "how long to wait for the mount daemon to exit")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		st, _ := fusemount.QueryStatus(cmd.Context(), args[0], "")
		if err := fusemount.Unmount(args[0]); err != nil {
			return err
		}
		if st == nil {
			return nil
		}
		// Wait for the daemon to notice and exit, so scripts can rely on
		// "umount returned" meaning "nothing left running".
		ctx, cancel := context.WithTimeout(cmd.Context(), wait)
		defer cancel()
		for {
			if err := syscallKill0(st.PID); err != nil {
				return nil
			}
			select {
			case <-ctx.Done():
				return fmt.Errorf("unmounted, but mount daemon %d is still running after %s", st.PID, wait)
			case <-time.After(50 * time.Millisecond):
			}
		}
	}
	return cmd
}

func newStatus(g *globals) *cobra.Command {
	var asJSON bool
	var socket string
	cmd := &cobra.Command{
		Use:   "status MOUNTPOINT",
		Short: "Show a mount daemon's state, image, cache and read statistics",
		Args:  cobra.ExactArgs(1),
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print JSON")
	cmd.Flags().StringVar(&socket, "socket", "", "control socket (default: derived from the mountpoint)")
	cmd.RunE = func(cmd *cobra.Command, args []string) error {
		st, err := fusemount.QueryStatus(cmd.Context(), args[0], socket)
		if err != nil {
			return err
		}
		if asJSON {
			enc := json.NewEncoder(os.Stdout)
			enc.SetIndent("", "  ")
			return enc.Encode(st)
		}
		fmt.Printf("mountpoint   %s (%s, pid %d, up %s)\n", st.Mountpoint, st.State, st.PID, time.Since(st.Started).Round(time.Second))
		fmt.Printf("image        %s %s\n", st.Image, st.Digest)
		fmt.Printf("files        %d\n", st.Files)
		var srcs []string
		for s := range st.Reads {
			srcs = append(srcs, s)
		}
		sort.Strings(srcs)
		for _, s := range srcs {
			fmt.Printf("reads        %-9s %8d reads %10s\n", s, st.Reads[s], humanBytes(int64(st.ReadBytes[s])))
		}
		for s, n := range st.Backend {
			fmt.Printf("fetched      %-9s %s\n", s, humanBytes(int64(n)))
		}
		fmt.Printf("node cache   hit ratio %.1f%% (%d hits, %d misses)\n", 100*st.HitRatio, st.CacheHits, st.CacheMiss)
		if st.Cache != nil {
			fmt.Printf("             %s in %d chunks, capacity %s, %d evictions\n", humanBytes(st.Cache.Bytes), st.Cache.Entries, humanBytes(st.Cache.Capacity), st.Cache.Evictions)
		}
		if fc := st.FileCopies; fc != nil {
			fmt.Printf("file copies  %s in %d files, capacity %s; %d passthrough opens, %d written, %d evicted\n",
				humanBytes(fc.Bytes), fc.Copies, humanBytes(fc.Capacity), st.Passthrough, fc.Written, fc.Evicted)
		}
		fmt.Printf("prefetch     %d / %d chunks\n", st.Prefetch[0], st.Prefetch[1])
		fmt.Printf("in flight    %.0f fetches; %d read errors, %d verification failures\n", st.InFlight, st.Errors, st.Verify)
		return nil
	}
	return cmd
}
