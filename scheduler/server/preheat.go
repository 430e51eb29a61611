package server

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"

	"damselfly/scheduler"
	"damselfly/scheduler/preheatwire"
)

// Bounds of preheat jobs. They are constants rather than configuration
// keys: they protect the scheduler, and no deployment has asked to tune
// them yet.
const (
	// maxPreheatJobs bounds the jobs kept, running or ended.
	maxPreheatJobs = 64
	// maxPreheatTargets bounds the peers of one job.
	maxPreheatTargets = 1024
	// preheatRetention is how long an ended job is kept for GET.
	preheatRetention = 10 * time.Minute
	// defaultPreheatTimeout and maxPreheatTimeout bound a job's run.
	defaultPreheatTimeout = time.Hour
	maxPreheatTimeout     = 24 * time.Hour
	// preheatStall is how long a peer may send nothing (it sends
	// progress every half second) before it is taken as failed.
	preheatStall = 30 * time.Second
	// preheatDialTimeout bounds opening the stream to a peer.
	preheatDialTimeout = 10 * time.Second
	// preheatWriteTimeout bounds writing the request.
	preheatWriteTimeout = 10 * time.Second
)

// Job and target states.
const (
	preheatPending   = "pending"
	preheatRunning   = "running"
	preheatDone      = "done"
	preheatFailed    = "failed"
	preheatCancelled = "cancelled"
)

// Errors of starting a job, told apart by the admin API.
var (
	errPreheatBadRequest = errors.New("bad preheat request")
	errPreheatNoTargets  = errors.New("no live, unbanned peer matches")
	errPreheatBusy       = errors.New("too many preheat jobs")
	errPreheatClosed     = errors.New("scheduler shutting down")
)

// preheatRequest is a job as asked for.
type preheatRequest struct {
	Image        string
	Peers        int
	All          bool
	Labels       map[string]string
	PrefetchOnly bool
	Timeout      time.Duration
}

// validate reports what is wrong with r, and fills its default timeout.
func (r *preheatRequest) validate() error {
	var errs []error
	if _, err := preheatwire.Encode(&preheatwire.Request{Image: r.Image}); err != nil {
		errs = append(errs, fmt.Errorf("image: %w", err))
	} else if len(r.Image) < len("docker://x") || r.Image[:len("docker://")] != "docker://" {
		errs = append(errs, fmt.Errorf("image: %q is not a docker:// reference", r.Image))
	}
	if r.Peers < 0 || r.Peers > maxPreheatTargets {
		errs = append(errs, fmt.Errorf("peers: %d is not in [0, %d]", r.Peers, maxPreheatTargets))
	}
	if r.All && r.Peers > 0 {
		errs = append(errs, errors.New("peers and all: give one"))
	}
	if len(r.Labels) > scheduler.MaxLabels {
		errs = append(errs, fmt.Errorf("labels: %d, more than %d", len(r.Labels), scheduler.MaxLabels))
	}
	switch {
	case r.Timeout == 0:
		r.Timeout = defaultPreheatTimeout
	case r.Timeout < 0 || r.Timeout > maxPreheatTimeout:
		errs = append(errs, fmt.Errorf("timeout: %v is not in (0, %v]", r.Timeout, maxPreheatTimeout))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("%w: %w", errPreheatBadRequest, err)
	}
	return nil
}

// preheatJob is one job: its targets run in goroutines counted in the
// server's streams, and done closes when all have ended.
type preheatJob struct {
	id      string
	req     preheatRequest
	started time.Time
	cancel  context.CancelFunc
	done    chan struct{}
	targets []*preheatTarget

	mu        sync.Mutex
	cancelled bool
	state     string
	finished  time.Time
}

// preheatTarget is one peer of a job.
type preheatTarget struct {
	peer  string
	addrs []string

	mu       sync.Mutex
	state    string
	msg      string
	counts   preheatwire.Counts
	started  time.Time
	finished time.Time
}

func (t *preheatTarget) set(f func(t *preheatTarget)) {
	t.mu.Lock()
	defer t.mu.Unlock()
	f(t)
}

// end records a target's final state unless it has one.
func (t *preheatTarget) end(state, msg string) {
	t.set(func(t *preheatTarget) {
		if t.state == preheatDone || t.state == preheatFailed || t.state == preheatCancelled {
			return
		}
		t.state, t.msg, t.finished = state, msg, time.Now()
	})
}

// preheats holds the jobs of a server.
type preheats struct {
	s *Server

	mu   sync.Mutex
	jobs map[string]*preheatJob
}

func newPreheats(s *Server) *preheats {
	return &preheats{s: s, jobs: make(map[string]*preheatJob)}
}

// start validates r, chooses its targets and starts the job.
func (m *preheats) start(r preheatRequest) (*preheatJob, error) {
	if err := r.validate(); err != nil {
		return nil, err
	}
	now := time.Now()
	n := r.Peers
	if r.All {
		n = 0
	}
	chosen := choosePreheatTargets(m.s.state.Peers(now), now, r.Labels, n)
	if len(chosen) == 0 {
		return nil, errPreheatNoTargets
	}
	if len(chosen) > maxPreheatTargets {
		chosen = chosen[:maxPreheatTargets]
	}
	var idb [8]byte
	_, _ = rand.Read(idb[:])
	ctx, cancel := context.WithTimeout(context.Background(), r.Timeout)
	job := &preheatJob{id: hex.EncodeToString(idb[:]), req: r, started: now, cancel: cancel, done: make(chan struct{}), state: preheatRunning}
	for _, p := range chosen {
		job.targets = append(job.targets, &preheatTarget{peer: p.ID, addrs: p.Addrs, state: preheatPending})
	}

	m.mu.Lock()
	m.pruneLocked(now)
	if len(m.jobs) >= maxPreheatJobs {
		m.evictEndedLocked()
	}
	if len(m.jobs) >= maxPreheatJobs {
		m.mu.Unlock()
		cancel()
		return nil, errPreheatBusy
	}
	// Counted in the server's streams, so that Run waits for the job.
	m.s.mu.Lock()
	if m.s.closed {
		m.s.mu.Unlock()
		m.mu.Unlock()
		cancel()
		return nil, errPreheatClosed
	}
	m.s.streams.Add(1)
	m.s.mu.Unlock()
	m.jobs[job.id] = job
	m.mu.Unlock()

	go func() {
		defer m.s.streams.Done()
		m.run(ctx, job)
	}()
	m.s.log.Info("preheat started", "job", job.id, "image", r.Image, "peers", len(job.targets), "prefetch_only", r.PrefetchOnly)
	return job, nil
}

// run runs every target of job at once and records the job's end.
func (m *preheats) run(ctx context.Context, job *preheatJob) {
	defer job.cancel()
	var wg sync.WaitGroup
	for _, t := range job.targets {
		wg.Go(func() { m.runTarget(ctx, job, t) })
	}
	wg.Wait()
	job.mu.Lock()
	job.state = preheatDone
	failed := 0
	for _, t := range job.targets {
		t.mu.Lock()
		if t.state != preheatDone {
			failed++
		}
		t.mu.Unlock()
	}
	switch {
	case job.cancelled:
		job.state = preheatCancelled
	case failed > 0:
		job.state = preheatFailed
	}
	job.finished = time.Now()
	state := job.state
	job.mu.Unlock()
	close(job.done)
	m.s.log.Info("preheat ended", "job", job.id, "state", state, "peers", len(job.targets), "failed", failed)
}

// cancelJob cancels job: every target's stream is reset.
func (job *preheatJob) cancelJob() {
	job.mu.Lock()
	if job.state == preheatRunning {
		job.cancelled = true
	}
	job.mu.Unlock()
	job.cancel()
}

// get returns the job with id, or nil.
func (m *preheats) get(id string) *preheatJob {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked(time.Now())
	return m.jobs[id]
}

// list returns the jobs, oldest first.
func (m *preheats) list() []*preheatJob {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.pruneLocked(time.Now())
	out := make([]*preheatJob, 0, len(m.jobs))
	for _, j := range m.jobs {
		out = append(out, j)
	}
	slices.SortFunc(out, func(a, b *preheatJob) int { return a.started.Compare(b.started) })
	return out
}

// pruneLocked forgets jobs that ended more than preheatRetention ago.
func (m *preheats) pruneLocked(now time.Time) {
	for id, j := range m.jobs {
		j.mu.Lock()
		old := !j.finished.IsZero() && now.Sub(j.finished) > preheatRetention
		j.mu.Unlock()
		if old {
			delete(m.jobs, id)
		}
	}
}

// evictEndedLocked forgets the job that ended first, if any has ended.
func (m *preheats) evictEndedLocked() {
	var oldest *preheatJob
	var at time.Time
	for _, j := range m.jobs {
		j.mu.Lock()
		f := j.finished
		j.mu.Unlock()
		if !f.IsZero() && (oldest == nil || f.Before(at)) {
			oldest, at = j, f
		}
	}
	if oldest != nil {
		delete(m.jobs, oldest.id)
	}
}
