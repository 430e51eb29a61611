// Command damselfly converts OCI images to RAFS, inspects, checks and
// unpacks them. Each subcommand is a thin adapter: it resolves its
// settings (file, DAMSELFLY_* environment, flags) and calls one run
// function with the root context, which is cancelled on SIGINT/SIGTERM.
package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = "dev"

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	stopProfiles := startProfiles(os.Args[1:])
	err := newRoot().ExecuteContext(ctx)
	stopProfiles()
	stop()
	if err != nil {
		if !errors.Is(err, errSilent) {
			fmt.Fprintln(os.Stderr, "damselfly:", err)
		}
		os.Exit(1)
	}
}

// errSilent marks a failure the command has already reported.
var errSilent = errors.New("failed")

type globals struct {
	configFile string
	logLevel   string
	logFormat  string
}

func newRoot() *cobra.Command {
	g := &globals{}
	root := &cobra.Command{
		Use:           "damselfly",
		Short:         "Lazy-loading RAFS images with peer-to-peer chunk distribution",
		Version:       version,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	pf := root.PersistentFlags()
	pf.StringVar(&g.configFile, "config", "", "configuration file (YAML); DAMSELFLY_* environment variables override it")
	pf.StringVar(&g.logLevel, "log-level", "info", "log level: debug, info, warn, error")
	pf.StringVar(&g.logFormat, "log-format", "text", "log format: text or json")
	root.AddCommand(newConvert(g), newInspect(g), newCheck(g), newUnpack(g), newMount(g), newUmount(g), newStatus(g), newDemo(g), newPreheat(g))
	for _, c := range daemonCommands {
		root.AddCommand(c(g))
	}
	return root
}

// daemonCommands are the long-running daemons' subcommands (peer,
// scheduler); each file registers its own from init, so they are added
// in file order.
var daemonCommands []func(*globals) *cobra.Command

func (g *globals) logger() (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(g.logLevel)); err != nil {
		return nil, fmt.Errorf("--log-level: %w", err)
	}
	o := &slog.HandlerOptions{Level: lvl}
	switch g.logFormat {
	case "text":
		return slog.New(slog.NewTextHandler(os.Stderr, o)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(os.Stderr, o)), nil
	}
	return nil, fmt.Errorf("--log-format %q: want text or json", g.logFormat)
}

// unlessPrintConfig is args, except that --print-config takes none:
// printing a command's settings needs no image or path.
func unlessPrintConfig(args cobra.PositionalArgs) cobra.PositionalArgs {
	return func(cmd *cobra.Command, a []string) error {
		if pc, err := cmd.Flags().GetBool("print-config"); err == nil && pc {
			return nil
		}
		return args(cmd, a)
	}
}
