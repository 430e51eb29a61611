package proxy

import (
	"bytes"
	"net/http"
	"strconv"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// maxHeldBody bounds the body of a held answer (an error page).
const maxHeldBody = 64 << 10

// heldWriter stands between registry.Client.Forward and the client for
// requests the node may answer itself when the origin cannot: an answer
// that says the origin is down (a 5xx after Forward's retries, or
// Forward's own 502/504 when nothing answered) is held back, so that the
// caller can answer from the node instead, or pass it on with replay.
// Any other answer goes to the client as it comes; the body of a 200 is
// kept too (up to max bytes) when max > 0, for the manifest store.
type heldWriter struct {
	w    http.ResponseWriter
	h    http.Header
	max  int // body of a 200 to keep; 0: none
	code int
	held bool
	body bytes.Buffer // the held body, or the kept body of a 200
	over bool         // the 200's body was over max: not kept
}

func newHeldWriter(w http.ResponseWriter, keep int) *heldWriter {
	return &heldWriter{w: w, h: http.Header{}, max: keep}
}

// originDown reports whether an answer with status code says that the
// origin could not serve the request at all.
func originDown(code int) bool { return code >= 500 }

func (hw *heldWriter) Header() http.Header { return hw.h }

func (hw *heldWriter) WriteHeader(code int) {
	if hw.code != 0 {
		return
	}
	hw.code = code
	if originDown(code) {
		hw.held = true
		return
	}
	dst := hw.w.Header()
	for k, v := range hw.h {
		dst[k] = v
	}
	hw.w.WriteHeader(code)
}

func (hw *heldWriter) Write(p []byte) (int, error) {
	if hw.code == 0 {
		hw.WriteHeader(http.StatusOK)
	}
	if hw.held {
		if n := min(len(p), maxHeldBody-hw.body.Len()); n > 0 {
			hw.body.Write(p[:n])
		}
		return len(p), nil
	}
	if hw.code == http.StatusOK && hw.max > 0 && !hw.over {
		if hw.body.Len()+len(p) > hw.max {
			hw.over = true
			hw.body = bytes.Buffer{}
		} else {
			hw.body.Write(p)
		}
	}
	return hw.w.Write(p)
}

// replay passes a held answer on to the client.
func (hw *heldWriter) replay() {
	dst := hw.w.Header()
	for k, v := range hw.h {
		dst[k] = v
	}
	dst.Set("Content-Length", strconv.Itoa(hw.body.Len()))
	hw.w.WriteHeader(hw.code)
	hw.w.Write(hw.body.Bytes())
}

// headBlob answers a HEAD of a blob: from the origin while it answers;
// when it cannot, from the piece table of a blob the node can serve from
// its pieces, checked against the whole blob by this node, so that
// clients that ask before they GET (skopeo, crane) can pull through an
// outage as the GET can. The client must be one the registry allowed
// (the gate, as for the GET).
func (s *Server) headBlob(w http.ResponseWriter, r *http.Request, bs BlobSource, ref registry.Ref, path string, blob rafs.Digest) string {
	hw := newHeldWriter(w, 0)
	served := s.passThrough(w, r, ref, path, hw)
	if !hw.held {
		if hw.code == http.StatusOK {
			s.gate.allow(ref, "blobs", blob.String())
		}
		return served
	}
	// The registry failed just now: the gate decides on what it
	// remembers rather than waiting for it again.
	s.gate.markDown(ref.Registry)
	d := s.gate.authorize(r.Context(), ref, "blobs", blob.String(), "")
	s.m.authorize(d)
	if !d.allowed {
		_, msg := refusal(d, ref.Registry)
		s.log.Info("mirror request refused", "registry", ref.Registry, "repo", ref.Repo, "blob", blob, "why", msg)
		refuse(w, d, ref.Registry)
		return ServedRefused
	}
	t, verified := bs.PieceTable(r.Context(), ref, blob, false)
	if t == nil || !verified || t.Blob != blob {
		hw.replay()
		return served
	}
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Docker-Content-Digest", blob.String())
	h.Set("Accept-Ranges", "bytes")
	h.Set("Content-Length", strconv.FormatInt(t.Size, 10))
	w.WriteHeader(http.StatusOK)
	return ServedNode
}
