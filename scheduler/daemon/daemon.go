// Package daemon assembles the scheduler daemon: the cluster's libp2p
// host (package peer/host, shared with the peers) and the scheduler
// server on it (package scheduler/server, which takes the host built and
// so depends on no peer package). Its Config is the shape of
// configs/scheduler.yaml.
package daemon

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"damselfly/configs/field"
	"damselfly/peer/host"
	"damselfly/scheduler/server"
)

// Config is the scheduler daemon's configuration
// (configs/scheduler.yaml): the cluster's libp2p host beside the server's
// own keys.
type Config struct {
	// Host is the libp2p host: identity, listen addresses, cluster key.
	Host          host.Config `mapstructure:"host"`
	server.Config `mapstructure:",squash"`
}

// Default returns the production configuration of a scheduler whose
// state (identity, cluster key) lives in dir.
func Default(dir string) Config {
	hc := host.Default(dir)
	hc.ListenAddrs = []string{server.DefaultListenAddr}
	return Config{Host: hc, Config: server.Default()}
}

// Validate reports every problem at once, each naming its key.
func (c Config) Validate() error {
	return errors.Join(field.In("host", c.Host.Validate()), c.Config.Validate())
}

// New starts the host and returns the server on it, ready to Run; the
// server owns the host from then on. log may be nil.
func New(cfg Config, log *slog.Logger) (*server.Server, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	hc := cfg.Host
	hc.Registerer = reg
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	h, err := host.New(ctx, hc, log)
	if err != nil {
		return nil, fmt.Errorf("start scheduler host: %w", err)
	}
	return server.New(cfg.Config, h, reg, log)
}
