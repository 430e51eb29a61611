package server

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"
)

// maxPreheatBody bounds a POST /api/v1/preheat body.
const maxPreheatBody = 64 << 10

// PreheatRequestJSON is the body of POST /api/v1/preheat.
type PreheatRequestJSON struct {
	// Image is a docker://HOST/REPO[:TAG|@DIGEST] RAFS image.
	Image string `json:"image"`
	// Peers is how many peers to preheat, spread over zones, racks and
	// hosts; 0 means every matching peer, as All does.
	Peers int  `json:"peers,omitempty"`
	All   bool `json:"all,omitempty"`
	// Labels select the peers carrying all of them.
	Labels map[string]string `json:"labels,omitempty"`
	// PrefetchOnly fetches the chunks of the prefetch table's files only.
	PrefetchOnly bool `json:"prefetch_only,omitempty"`
	// Timeout bounds the job, as a Go duration ("30m"); default 1h.
	Timeout string `json:"timeout,omitempty"`
}

// PreheatJSON is a job in GET /api/v1/preheat/{id}.
type PreheatJSON struct {
	ID           string            `json:"id"`
	Image        string            `json:"image"`
	PrefetchOnly bool              `json:"prefetch_only"`
	State        string            `json:"state"` // running, done, failed, cancelled
	Started      time.Time         `json:"started"`
	Finished     *time.Time        `json:"finished,omitempty"`
	ChunksDone   uint64            `json:"chunks_done"`
	ChunksTotal  uint64            `json:"chunks_total"`
	BytesDone    uint64            `json:"bytes_done"`
	BytesTotal   uint64            `json:"bytes_total"`
	Peers        []PreheatPeerJSON `json:"peers"`
}

// PreheatPeerJSON is one target peer of a job.
type PreheatPeerJSON struct {
	Peer        string     `json:"peer"`
	State       string     `json:"state"` // pending, running, done, failed, cancelled
	Message     string     `json:"message,omitempty"`
	ChunksDone  uint64     `json:"chunks_done"`
	ChunksTotal uint64     `json:"chunks_total"`
	BytesDone   uint64     `json:"bytes_done"`
	BytesTotal  uint64     `json:"bytes_total"`
	Started     *time.Time `json:"started,omitempty"`
	Finished    *time.Time `json:"finished,omitempty"`
}

func timePtr(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// view returns job as JSON; totals are sums over its peers.
func (job *preheatJob) view() PreheatJSON {
	job.mu.Lock()
	j := PreheatJSON{
		ID: job.id, Image: job.req.Image, PrefetchOnly: job.req.PrefetchOnly,
		State: job.state, Started: job.started, Finished: timePtr(job.finished),
		Peers: make([]PreheatPeerJSON, 0, len(job.targets)),
	}
	job.mu.Unlock()
	for _, t := range job.targets {
		t.mu.Lock()
		p := PreheatPeerJSON{
			Peer: t.peer, State: t.state, Message: t.msg,
			ChunksDone: t.counts.ChunksDone, ChunksTotal: t.counts.ChunksTotal,
			BytesDone: t.counts.BytesDone, BytesTotal: t.counts.BytesTotal,
			Started: timePtr(t.started), Finished: timePtr(t.finished),
		}
		t.mu.Unlock()
		j.ChunksDone += p.ChunksDone
		j.ChunksTotal += p.ChunksTotal
		j.BytesDone += p.BytesDone
		j.BytesTotal += p.BytesTotal
		j.Peers = append(j.Peers, p)
	}
	return j
}

// preheatRoutes adds the preheat endpoints to mux.
func (s *Server) preheatRoutes(mux *http.ServeMux) {
	m := newPreheats(s)
	mux.HandleFunc("POST /api/v1/preheat", func(w http.ResponseWriter, r *http.Request) {
		var body PreheatRequestJSON
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxPreheatBody))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&body); err != nil {
			status := http.StatusBadRequest
			if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
				status = http.StatusRequestEntityTooLarge
			}
			writeError(w, status, fmt.Errorf("body: %w", err))
			return
		}
		if _, err := dec.Token(); !errors.Is(err, io.EOF) {
			writeError(w, http.StatusBadRequest, errors.New("body: more than one JSON value"))
			return
		}
		req := preheatRequest{Image: body.Image, Peers: body.Peers, All: body.All, Labels: body.Labels, PrefetchOnly: body.PrefetchOnly}
		if body.Timeout != "" {
			d, err := time.ParseDuration(body.Timeout)
			if err != nil {
				writeError(w, http.StatusBadRequest, fmt.Errorf("timeout: %w", err))
				return
			}
			req.Timeout = d
		}
		job, err := m.start(req)
		switch {
		case errors.Is(err, errPreheatBadRequest):
			writeError(w, http.StatusBadRequest, err)
		case errors.Is(err, errPreheatNoTargets):
			writeError(w, http.StatusConflict, err)
		case errors.Is(err, errPreheatBusy), errors.Is(err, errPreheatClosed):
			writeError(w, http.StatusServiceUnavailable, err)
		case err != nil:
			writeError(w, http.StatusInternalServerError, err)
		default:
			w.Header().Set("Location", "/api/v1/preheat/"+job.id)
			writeJSON(w, http.StatusAccepted, job.view())
		}
	})
	mux.HandleFunc("GET /api/v1/preheat", func(w http.ResponseWriter, _ *http.Request) {
		jobs := m.list()
		out := make([]PreheatJSON, 0, len(jobs))
		for _, j := range jobs {
			out = append(out, j.view())
		}
		writeJSON(w, http.StatusOK, out)
	})
	mux.HandleFunc("GET /api/v1/preheat/{id}", func(w http.ResponseWriter, r *http.Request) {
		job := m.get(r.PathValue("id"))
		if job == nil {
			writeError(w, http.StatusNotFound, errors.New("no such preheat job"))
			return
		}
		writeJSON(w, http.StatusOK, job.view())
	})
	// DELETE cancels the job and answers once every target has ended.
	mux.HandleFunc("DELETE /api/v1/preheat/{id}", func(w http.ResponseWriter, r *http.Request) {
		job := m.get(r.PathValue("id"))
		if job == nil {
			writeError(w, http.StatusNotFound, errors.New("no such preheat job"))
			return
		}
		job.cancelJob()
		select {
		case <-job.done:
		case <-r.Context().Done():
			return
		}
		s.log.Info("preheat cancelled by operator", "job", job.id)
		writeJSON(w, http.StatusOK, job.view())
	})
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
