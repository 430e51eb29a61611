package proxy

import (
	"encoding/json"
	"io"
	"net/http"
	"sync"

	"golang.org/x/sync/errgroup"

	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// grantChecks is how many registry checks one grants request runs at
// once.
const grantChecks = 8

// serveGrants answers a grants request: each blob is put to the gate with
// the client's credentials; allowed ones get their grant.
func (s *Server) serveGrants(w http.ResponseWriter, r *http.Request) {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, chunkapi.MaxGrantsRequest))
	if err != nil {
		http.Error(w, "grants request: "+err.Error(), http.StatusBadRequest)
		return
	}
	repo, blobs, err := chunkapi.ParseGrantsRequest(data)
	if err != nil {
		http.Error(w, "grants request: "+err.Error(), http.StatusBadRequest)
		return
	}
	reg, err := s.registryFor(r)
	if err != nil {
		http.Error(w, "grants request: "+err.Error(), http.StatusBadRequest)
		return
	}
	ref := registry.Ref{Registry: reg, Repo: repo, Authorization: r.Header.Get("Authorization")}
	resp := chunkapi.GrantsResponse{Grants: map[string]string{}, Refused: map[string]string{}}
	var mu sync.Mutex
	g, ctx := errgroup.WithContext(r.Context())
	g.SetLimit(grantChecks)
	for _, b := range blobs {
		g.Go(func() error {
			d := s.gate.authorize(ctx, ref, "blobs", b.String(), "")
			s.m.authorize(d)
			mu.Lock()
			defer mu.Unlock()
			if d.allowed {
				resp.Grants[b.String()] = s.gate.grantFor(ref, "blobs", b.String())
			} else {
				_, msg := refusal(d, reg)
				resp.Refused[b.String()] = msg
			}
			return nil
		})
	}
	g.Wait()
	body, _ := json.Marshal(resp)
	w.Header().Set("Content-Type", "application/json")
	w.Write(body)
}
