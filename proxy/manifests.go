package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"damselfly/rafs/manifests"
	"damselfly/rafs/registry"
)

// HeaderStale is set on a manifest the mirror answered by tag from the
// node's store because the origin could not be reached: its value is how
// long ago the origin last resolved the tag (a Go duration, "1h2m3s").
const HeaderStale = "X-Damselfly-Stale"

// Manifests and indexes through an outage (WithManifests).
//
//   - While the origin answers, a manifest GET or HEAD passes through as
//     before: a tag is always resolved there, so a tag pushed anew is
//     seen at once. The body of a 200 GET (up to manifests.MaxSize) is
//     kept in the store under the sha256 of its bytes, computed here: by
//     digest only if that is the digest asked for, by tag only if it
//     agrees with the registry's Docker-Content-Digest. A 200 by tag
//     records the tag's resolution (a HEAD's from its
//     Docker-Content-Digest: containerd resolves tags by HEAD, then GETs
//     the digest). A 200 also counts as the registry's verdict that
//     these credentials may read it (the gate, authz.go).
//   - When the origin cannot be reached (Forward's 502/504, or a 5xx
//     after its retries), the client is put to the gate first: only one
//     the registry allowed within AuthStale is answered from the store,
//     anyone else gets the gate's refusal whether or not the node holds
//     the manifest. A digest is served if the store holds it, verified;
//     a tag through its last resolution, if that is younger than
//     Config.ManifestStale, with HeaderStale; a resolution older than
//     that gets 503 saying so. With nothing stored, the origin's failure
//     goes to the client as before.
//
// Peers (WithManifestPeers) answer for what the node's store lacks, once
// the client has passed the gate: by digest, a manifest a peer holds of
// the same repository (its digest checked); by tag, the youngest
// resolution among the peers asked and the node's own, with its age
// since the origin made it, so the same staleness bound applies.
//
// The gate's verdicts are per object, but a registry grants pulls per
// repository: while the origin cannot be reached, a client the registry
// gave any manifest of a repository (within AuthStale) may have the
// repository's other manifests from the store and from peers, which hold
// them per repository. So a tag whose resolution moved on at another node
// can be followed to its new digest. Blobs keep per-object verdicts.

// ManifestPeers finds what the node's manifest store lacks on other peers
// of the cluster (peer/manifestshare.Share). What it returns has been
// verified and kept in the store.
type ManifestPeers interface {
	// Manifest returns manifest digest of repo at registry from a peer.
	Manifest(ctx context.Context, registry, repo, digest string) (manifests.Manifest, error)
	// Tag returns the youngest resolution of tag in repo at registry
	// that the peers asked hold, dated when the origin made it.
	Tag(ctx context.Context, registry, repo, tag string) (manifests.Tag, error)
	// Public returns when the peers (those holding object, a tag or
	// digest of repo) last saw the registry let anonymous clients pull
	// from repo.
	Public(ctx context.Context, registry, repo, object string) (time.Time, error)
}

// serveManifest answers a manifest GET or HEAD for object (a tag or a
// digest) and says what served it.
func (s *Server) serveManifest(w http.ResponseWriter, r *http.Request, ref registry.Ref, object, path string) string {
	keep := 0
	if r.Method == http.MethodGet {
		keep = manifests.MaxSize
	}
	hw := newHeldWriter(w, keep)
	served := s.passThrough(w, r, ref, path, hw)
	if !hw.held {
		if hw.code == http.StatusOK {
			s.keepManifest(r, ref, object, hw)
		}
		return served
	}
	s.gate.markDown(ref.Registry)
	if sv, ok := s.serveStoredManifest(w, r, ref, object); ok {
		return sv
	}
	hw.replay()
	return served
}

// keepManifest records a 200 the origin gave for object.
func (s *Server) keepManifest(r *http.Request, ref registry.Ref, object string, hw *heldWriter) {
	s.gate.allow(ref, "manifests", object)
	byDigest := registry.ValidDigest(object)
	said := hw.h.Get("Docker-Content-Digest")
	digest := said
	if r.Method == http.MethodGet {
		body := hw.body.Bytes()
		n, err := strconv.Atoi(hw.h.Get("Content-Length"))
		if hw.over || (err == nil && n != len(body)) {
			return // over the limit, or cut short
		}
		digest = manifests.Digest(body)
		switch {
		case byDigest && digest != object:
			s.log.Warn("manifest from the origin does not match its digest; not kept", "registry", ref.Registry, "repo", ref.Repo, "digest", object, "body", digest)
			return
		case !byDigest && said != "" && said != digest:
			s.log.Warn("manifest from the origin does not match its Docker-Content-Digest; not kept", "registry", ref.Registry, "repo", ref.Repo, "tag", object, "header", said, "body", digest)
			return
		}
		m := manifests.Manifest{MediaType: hw.h.Get("Content-Type"), Digest: digest, Body: body}
		if err := s.manifests.Put(ref.Registry, ref.Repo, m); err != nil {
			s.log.Warn("manifest not kept", "registry", ref.Registry, "repo", ref.Repo, "digest", digest, "err", err)
			return
		}
	}
	if byDigest || !registry.ValidDigest(digest) {
		return
	}
	s.gate.allow(ref, "manifests", digest)
	if err := s.manifests.SetTag(ref.Registry, ref.Repo, object, digest); err != nil {
		s.log.Warn("tag resolution not kept", "registry", ref.Registry, "repo", ref.Repo, "tag", object, "err", err)
	}
}

// serveStoredManifest answers for object from the store, the origin
// being unreachable, and says what served it; false if it wrote nothing
// (the store cannot answer).
func (s *Server) serveStoredManifest(w http.ResponseWriter, r *http.Request, ref registry.Ref, object string) (string, bool) {
	d := s.gate.authorize(r.Context(), ref, "manifests", object, "")
	s.m.authorize(d)
	if !d.allowed {
		_, msg := refusal(d, ref.Registry)
		s.log.Info("mirror request refused", "registry", ref.Registry, "repo", ref.Repo, "manifest", object, "why", msg)
		refuse(w, d, ref.Registry)
		return ServedRefused, true
	}
	digest, byTag := object, !registry.ValidDigest(object)
	var age time.Duration
	fromPeers := false
	if byTag {
		t, ok := s.manifests.Tag(ref.Registry, ref.Repo, object)
		if s.mpeers != nil {
			if pt, err := s.mpeers.Tag(r.Context(), ref.Registry, ref.Repo, object); err == nil && (!ok || pt.At.After(t.At)) {
				t, ok, fromPeers = pt, true, true
			}
		}
		if !ok {
			return "", false
		}
		age = max(time.Since(t.At), 0)
		if age > s.cfg.ManifestStale {
			ociError(w, http.StatusServiceUnavailable, "UNAVAILABLE", fmt.Sprintf(
				"the origin registry %s cannot be reached, and tag %s was last resolved there %v ago, longer than proxy.manifest_stale (%v) allows",
				ref.Registry, object, age.Round(time.Second), s.cfg.ManifestStale))
			return ServedUnreachable, true
		}
		digest = t.Digest
	}
	m, err := s.manifests.Get(ref.Registry, ref.Repo, digest)
	if err != nil && !errors.Is(err, manifests.ErrNotFound) {
		s.log.Warn("stored manifest dropped", "registry", ref.Registry, "repo", ref.Repo, "digest", digest, "err", err)
	}
	if err != nil && s.mpeers != nil {
		m, err = s.mpeers.Manifest(r.Context(), ref.Registry, ref.Repo, digest)
		fromPeers = err == nil
	}
	if err != nil {
		return "", false
	}
	if byTag {
		// The client will ask for the digest next (containerd resolves a
		// tag with HEAD, then GETs the digest): it may have it.
		s.gate.allow(ref, "manifests", m.Digest)
	}
	h := w.Header()
	if m.MediaType != "" {
		h.Set("Content-Type", m.MediaType)
	}
	h.Set("Docker-Content-Digest", m.Digest)
	h.Set("Docker-Distribution-Api-Version", "registry/2.0")
	h.Set("Etag", `"`+m.Digest+`"`)
	h.Set("Content-Length", strconv.Itoa(len(m.Body)))
	served, by := ServedNode, "digest"
	if byTag {
		h.Set(HeaderStale, age.Round(time.Second).String())
		served, by = ServedNodeStale, "tag"
	}
	if fromPeers {
		served = ServedPeers
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		w.Write(m.Body)
	}
	s.m.storedServed.WithLabelValues(by).Inc()
	s.log.Info("manifest served from the cluster: origin unreachable", "registry", ref.Registry, "repo", ref.Repo, "ref", object, "digest", m.Digest, "tag_age", age.Round(time.Second), "from_peers", fromPeers)
	return served, true
}
