package server

import (
	"encoding/json"
	"net/http"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// adminHandler serves the admin API: JSON views of the state, bans, health
// and metrics. It listens on loopback by default and has no authentication.
func (s *Server) adminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /api/v1/peers", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, peersJSON(s.state.Peers(time.Now())))
	})
	mux.HandleFunc("GET /api/v1/blobs", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, blobsJSON(s.state.Blobs()))
	})
	mux.HandleFunc("GET /api/v1/origin", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, originJSON(s.state.OriginFetches(time.Now())))
	})
	mux.HandleFunc("GET /api/v1/bans", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, bansJSON(s.state.Bans(time.Now())))
	})
	mux.HandleFunc("POST /api/v1/bans/{peer}", func(w http.ResponseWriter, r *http.Request) {
		id, ok := peerParam(w, r)
		if !ok {
			return
		}
		s.state.Ban(id, time.Now())
		s.log.Warn("peer banned by operator", "peer", id)
		writeJSON(w, http.StatusOK, map[string]string{"banned": id})
	})
	mux.HandleFunc("DELETE /api/v1/bans/{peer}", func(w http.ResponseWriter, r *http.Request) {
		id, ok := peerParam(w, r)
		if !ok {
			return
		}
		s.state.Unban(id)
		s.log.Info("peer unbanned by operator", "peer", id)
		writeJSON(w, http.StatusOK, map[string]string{"unbanned": id})
	})
	s.preheatRoutes(mux)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.metrics.reg, promhttp.HandlerOpts{}))
	return mux
}

// peerParam reads the {peer} path element, which must be a peer ID.
func peerParam(w http.ResponseWriter, r *http.Request) (string, bool) {
	id, err := peer.Decode(r.PathValue("peer"))
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "peer: " + err.Error()})
		return "", false
	}
	return id.String(), true
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
