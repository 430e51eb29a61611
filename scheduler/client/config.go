package client

import (
	"errors"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"damselfly/scheduler"
)

// Config configures a Client. Keys (mapstructure tags) are the ones of the
// peer daemon's scheduler section; fields tagged config:"advanced" are
// tunables whose defaults need no touching (advanced.scheduler.* in the
// peer's file), and Labels and RouteTimeout are set by the daemon from
// its own labels and advanced.node.route_timeout.
type Config struct {
	// Schedulers are the scheduler daemons' multiaddrs, each ending in
	// /p2p/<peer ID>. Several addresses of one scheduler are merged.
	Schedulers []string `mapstructure:"schedulers"`
	// Labels locate this peer: scheduler.LabelHost, LabelRack, LabelZone
	// and any others, sent on registration.
	Labels map[string]string `mapstructure:"-"`
	// UploadCapacity is the bytes/s this peer may upload; 0 = unknown.
	UploadCapacity int64 `mapstructure:"upload_capacity" config:"advanced"`
	// HeartbeatInterval is how often each scheduler is sent a heartbeat,
	// and how often undelivered announcements are retried.
	HeartbeatInterval time.Duration `mapstructure:"heartbeat_interval" config:"advanced"`
	// RouteTimeout bounds one Route call over all schedulers tried.
	RouteTimeout time.Duration `mapstructure:"-"`
	// RequestTimeout bounds one background request (register, heartbeat,
	// announce, report), dial included.
	RequestTimeout time.Duration `mapstructure:"request_timeout" config:"advanced"`
	// DeadAfter is how many heartbeats in a row may fail before a
	// scheduler is taken as dead and its blobs move to the others.
	DeadAfter int `mapstructure:"dead_after" config:"advanced"`
	// QueueSize bounds the Abandon and Report messages waiting for
	// delivery; more are dropped (they only speed things up).
	QueueSize int `mapstructure:"queue_size" config:"advanced"`
}

// Default returns the default configuration (no schedulers).
func Default() Config {
	return Config{
		HeartbeatInterval: 2 * time.Second,
		RouteTimeout:      2 * time.Second,
		RequestTimeout:    5 * time.Second,
		DeadAfter:         2,
		QueueSize:         1024,
	}
}

// Validate reports every problem with c at once, each naming its field.
func (c Config) Validate() error {
	var errs []error
	if len(c.Schedulers) == 0 {
		errs = append(errs, errors.New("schedulers: none given"))
	}
	for i, s := range c.Schedulers {
		if _, err := parseScheduler(s); err != nil {
			errs = append(errs, fmt.Errorf("schedulers[%d]: %w", i, err))
		}
	}
	if len(c.Labels) > scheduler.MaxLabels {
		errs = append(errs, fmt.Errorf("labels: %d, more than %d", len(c.Labels), scheduler.MaxLabels))
	}
	for k, v := range c.Labels {
		if len(k) == 0 || len(k) > scheduler.MaxStringLen || len(v) > scheduler.MaxStringLen {
			errs = append(errs, fmt.Errorf("labels: %q=%q: keys must be 1 to %d bytes, values at most %d", k, v, scheduler.MaxStringLen, scheduler.MaxStringLen))
		}
	}
	if c.UploadCapacity < 0 {
		errs = append(errs, fmt.Errorf("upload_capacity: %d is negative", c.UploadCapacity))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"heartbeat_interval", c.HeartbeatInterval}, {"route_timeout", c.RouteTimeout}, {"request_timeout", c.RequestTimeout}} {
		if d.v <= 0 {
			errs = append(errs, fmt.Errorf("%s: %v must be positive", d.name, d.v))
		}
	}
	if c.DeadAfter <= 0 {
		errs = append(errs, fmt.Errorf("dead_after: %d must be positive", c.DeadAfter))
	}
	if c.QueueSize <= 0 {
		errs = append(errs, fmt.Errorf("queue_size: %d must be positive", c.QueueSize))
	}
	return errors.Join(errs...)
}

func parseScheduler(s string) (*peer.AddrInfo, error) {
	m, err := ma.NewMultiaddr(s)
	if err != nil {
		return nil, fmt.Errorf("%q: %w", s, err)
	}
	ai, err := peer.AddrInfoFromP2pAddr(m)
	if err != nil {
		return nil, fmt.Errorf("%q: want a multiaddr ending in /p2p/<peer ID>: %w", s, err)
	}
	return ai, nil
}
