package daemon

import (
	"time"

	"damselfly/peer/fetch"
	"damselfly/proxy"
	"damselfly/rafs/cache"
	"damselfly/rafs/registry"
	"damselfly/scheduler/client"
)

// Status is the peer daemon's state as GET /status on its endpoint serves
// it ("damselfly peer status").
type Status struct {
	PeerID  string    `json:"peer_id"`
	Addrs   []string  `json:"addrs"`
	Started time.Time `json:"started"`
	// Delivered counts the chunks and pieces the node delivered, by
	// source (cache, peers, origin), and its fetching work.
	Delivered fetch.Stats `json:"delivered"`
	// CacheDir and Cache are the node cache's place and use.
	CacheDir string      `json:"cache_dir"`
	Cache    cache.Stats `json:"cache"`
	// Schedulers is each configured scheduler's state; empty when the
	// peer works alone.
	Schedulers []client.SchedulerState `json:"schedulers"`
	// Registries is what each origin registry (and storage host) answered
	// lately.
	Registries []registry.Reach `json:"registries"`
	// Recent are the last mirror requests, newest first.
	Recent []proxy.Pull `json:"recent"`
}

// Status returns the daemon's state. Safe for concurrent use.
func (d *Daemon) Status() Status {
	ai := d.host.AddrInfo()
	st := Status{
		PeerID:     ai.ID.String(),
		Started:    d.started,
		Delivered:  d.node.Stats(),
		CacheDir:   d.cacheDir,
		Cache:      d.cache.Stats(),
		Registries: d.up.Reachability(),
		Schedulers: []client.SchedulerState{},
	}
	for _, a := range ai.Addrs {
		st.Addrs = append(st.Addrs, a.String())
	}
	if d.sched != nil {
		st.Schedulers = d.sched.Schedulers()
	}
	if d.proxy != nil {
		st.Recent = d.proxy.Recent()
	}
	return st
}
