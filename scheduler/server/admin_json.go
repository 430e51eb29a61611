package server

import (
	"time"

	"damselfly/scheduler"
)

// The admin API's JSON documents: the core's views with snake_case keys
// and digests as strings.

// PeerJSON is one member in GET /api/v1/peers.
type PeerJSON struct {
	ID                string            `json:"id"`
	Addrs             []string          `json:"addrs"`
	Labels            map[string]string `json:"labels"`
	Source            string            `json:"source"`
	UploadCapacity    int64             `json:"upload_capacity"`
	ActiveUploads     int               `json:"active_uploads"`
	UploadBytesPerSec int64             `json:"upload_bytes_per_sec"`
	Joined            time.Time         `json:"joined"`
	LastSeen          time.Time         `json:"last_seen"`
	Alive             bool              `json:"alive"`
	Pending           int               `json:"pending"`
	Success           float64           `json:"success"`
	Throughput        float64           `json:"throughput"`
	Reports           int               `json:"reports"`
	Blobs             int               `json:"blobs"`
	Chunks            int64             `json:"chunks"`
	HoldingBytes      int64             `json:"holding_bytes"`
	OriginTurns       int               `json:"origin_turns"`
	BannedUntil       *time.Time        `json:"banned_until,omitempty"`
}

func peersJSON(v []scheduler.PeerView) []PeerJSON {
	out := make([]PeerJSON, 0, len(v))
	for _, p := range v {
		j := PeerJSON{
			ID: p.ID, Addrs: p.Addrs, Labels: p.Labels, Source: p.Source, UploadCapacity: p.UploadCapacity,
			ActiveUploads: p.Load.ActiveUploads, UploadBytesPerSec: p.Load.UploadBytesPerSec,
			Joined: p.Joined, LastSeen: p.LastSeen, Alive: p.Alive, Pending: p.Pending,
			Success: p.Success, Throughput: p.Throughput, Reports: p.Reports, Blobs: p.Blobs,
			Chunks: p.Chunks, HoldingBytes: p.HoldingBytes, OriginTurns: p.OriginTurns,
		}
		if !p.BannedUntil.IsZero() {
			j.BannedUntil = &p.BannedUntil
		}
		out = append(out, j)
	}
	return out
}

// BlobJSON is one blob in GET /api/v1/blobs.
type BlobJSON struct {
	Blob          string `json:"blob"`
	Holders       int    `json:"holders"`
	Chunks        int    `json:"chunks"`
	Copies        int64  `json:"copies"`
	OriginFetch   int    `json:"origin_fetch"`
	OriginWaiters int    `json:"origin_waiters"`
}

func blobsJSON(v []scheduler.BlobView) []BlobJSON {
	out := make([]BlobJSON, 0, len(v))
	for _, b := range v {
		out = append(out, BlobJSON{Blob: b.Blob.String(), Holders: b.Holders, Chunks: b.Chunks, Copies: b.Copies, OriginFetch: b.OriginFetch, OriginWaiters: b.OriginWaiter})
	}
	return out
}

// OriginJSON is one chunk in GET /api/v1/origin.
type OriginJSON struct {
	Blob     string        `json:"blob"`
	Chunk    uint32        `json:"chunk"`
	Fetchers []FetcherJSON `json:"fetchers"`
	Waiters  []string      `json:"waiters"`
}

// FetcherJSON is one peer's turn to fetch a chunk from origin.
type FetcherJSON struct {
	Peer     string    `json:"peer"`
	Deadline time.Time `json:"deadline"`
}

func originJSON(v []scheduler.OriginView) []OriginJSON {
	out := make([]OriginJSON, 0, len(v))
	for _, o := range v {
		j := OriginJSON{Blob: o.Blob.String(), Chunk: o.Chunk, Fetchers: []FetcherJSON{}, Waiters: o.Waiters}
		for _, f := range o.Fetchers {
			j.Fetchers = append(j.Fetchers, FetcherJSON{Peer: f.Peer, Deadline: f.Deadline})
		}
		if j.Waiters == nil {
			j.Waiters = []string{}
		}
		out = append(out, j)
	}
	return out
}

// BanJSON is one ban in GET /api/v1/bans.
type BanJSON struct {
	Peer     string    `json:"peer"`
	Since    time.Time `json:"since"`
	Until    time.Time `json:"until"`
	Accusers []string  `json:"accusers"`
}

func bansJSON(v []scheduler.BanView) []BanJSON {
	out := make([]BanJSON, 0, len(v))
	for _, b := range v {
		a := b.Accusers
		if a == nil {
			a = []string{}
		}
		out = append(out, BanJSON{Peer: b.Peer, Since: b.Since, Until: b.Until, Accusers: a})
	}
	return out
}
