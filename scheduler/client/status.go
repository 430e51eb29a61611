package client

// SchedulerState is what the client knows of one scheduler, for status
// pages.
type SchedulerState struct {
	// ID is the scheduler's peer ID.
	ID string `json:"id"`
	// Alive is false once heartbeats have failed in a row; Route then
	// skips it.
	Alive bool `json:"alive"`
	// Registered is true while this peer holds a session with it.
	Registered bool `json:"registered"`
	// Failures counts the heartbeats failed in a row.
	Failures int `json:"failures"`
	// Sessions counts the registrations made with it.
	Sessions uint64 `json:"sessions"`
}

// Schedulers returns the state of each configured scheduler, in the
// configured order.
func (c *Client) Schedulers() []SchedulerState {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]SchedulerState, len(c.remotes))
	for i, r := range c.remotes {
		out[i] = SchedulerState{ID: r.name, Alive: r.alive, Registered: r.registered, Failures: r.failures, Sessions: r.session}
	}
	return out
}
