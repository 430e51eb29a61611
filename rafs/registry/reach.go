package registry

import (
	"context"
	"errors"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"
)

// Reach is what the client has seen of one registry host lately: when it
// last answered (any HTTP response counts: the registry is reachable, if
// not always willing), when a request last failed to get an answer, and
// why.
type Reach struct {
	Host       string    `json:"host"`
	LastAnswer time.Time `json:"last_answer,omitzero"`
	LastError  time.Time `json:"last_error,omitzero"`
	Error      string    `json:"error,omitempty"`
	// Failing is true when the last request got no answer.
	Failing bool `json:"failing"`
}

// maxReach bounds the hosts remembered; the least recently used go first.
const maxReach = 64

// reachBook records Reach per host. Safe for concurrent use.
type reachBook struct {
	mu    sync.Mutex
	hosts map[string]*Reach
}

func (b *reachBook) record(host string, err error) {
	if err != nil && (errors.Is(err, context.Canceled) || errors.Is(err, ErrRefused)) {
		return // the caller left, or the policy refused: says nothing of the registry
	}
	host = strings.ToLower(host)
	now := time.Now()
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.hosts == nil {
		b.hosts = make(map[string]*Reach)
	}
	r := b.hosts[host]
	if r == nil {
		if len(b.hosts) >= maxReach {
			b.evictLocked()
		}
		r = &Reach{Host: host}
		b.hosts[host] = r
	}
	if err != nil {
		r.LastError, r.Error, r.Failing = now, withoutQuery(err).Error(), true
		return
	}
	r.LastAnswer, r.Failing = now, false
}

// evictLocked drops the host seen least recently.
func (b *reachBook) evictLocked() {
	var oldest string
	var at time.Time
	for h, r := range b.hosts {
		t := r.LastAnswer
		if r.LastError.After(t) {
			t = r.LastError
		}
		if oldest == "" || t.Before(at) {
			oldest, at = h, t
		}
	}
	delete(b.hosts, oldest)
}

// Reachability returns what the client has seen of each registry host it
// talked to (and the storage hosts registries redirected it to), sorted
// by host.
func (c *Client) Reachability() []Reach {
	c.reach.mu.Lock()
	out := make([]Reach, 0, len(c.reach.hosts))
	for _, r := range c.reach.hosts {
		out = append(out, *r)
	}
	c.reach.mu.Unlock()
	slices.SortFunc(out, func(a, b Reach) int { return strings.Compare(a.Host, b.Host) })
	return out
}

// reachTransport records each round trip's outcome in the book.
type reachTransport struct {
	inner http.RoundTripper
	book  *reachBook
}

func (t *reachTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.inner.RoundTrip(req)
	t.book.record(req.URL.Host, err)
	return resp, err
}
