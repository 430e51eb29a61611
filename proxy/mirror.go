package proxy

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
)

// HeaderDragonflyRegistry is Dragonfly's name for chunkapi.HeaderRegistry,
// accepted too so that its clients work unchanged.
const HeaderDragonflyRegistry = "X-Dragonfly-Registry"

// registryFor picks the upstream registry of a request: containerd's
// ?ns=HOST, then the registry headers, then the default.
func (s *Server) registryFor(r *http.Request) (string, error) {
	if ns := r.URL.Query().Get("ns"); ns != "" {
		return s.up.RegistryForHost(ns)
	}
	for _, h := range []string{chunkapi.HeaderRegistry, HeaderDragonflyRegistry} {
		if v := r.Header.Get(h); v != "" {
			return s.up.CheckRegistry(v)
		}
	}
	return s.up.DefaultRegistry()
}

// v2Route is a parsed /v2/ path.
type v2Route struct {
	name string // repository
	kind string // "blobs", "manifests", "referrers" or "tags"
	ref  string // digest or tag; "list" for tags
}

// parseV2 splits the path after "/v2/". Names may contain "blobs" or
// "manifests" as components, so the route is read from the end.
func parseV2(rest string) (v2Route, string, string) {
	parts := strings.Split(rest, "/")
	n := len(parts)
	if n < 3 {
		return v2Route{}, "NAME_UNKNOWN", "unknown path"
	}
	rt := v2Route{name: strings.Join(parts[:n-2], "/"), kind: parts[n-2], ref: parts[n-1]}
	switch rt.kind {
	case "tags":
		if rt.ref != "list" {
			return v2Route{}, "NAME_UNKNOWN", "unknown path"
		}
	case "blobs", "referrers":
		if !registry.ValidDigest(rt.ref) {
			return v2Route{}, "DIGEST_INVALID", "invalid digest " + registry.Quote(rt.ref)
		}
	case "manifests":
		if !registry.ValidTag(rt.ref) && !registry.ValidDigest(rt.ref) {
			return v2Route{}, "MANIFEST_INVALID", "invalid tag or digest " + registry.Quote(rt.ref)
		}
	default:
		return v2Route{}, "NAME_UNKNOWN", "unknown path"
	}
	if !registry.ValidRepo(rt.name) {
		return v2Route{}, "NAME_INVALID", "invalid repository name " + registry.Quote(rt.name)
	}
	return rt, "", ""
}

// forwardedQuery lists the query parameters passed upstream, by route.
var forwardedQuery = map[string][]string{
	"tags":      {"n", "last"},
	"referrers": {"artifactType"},
}

// serveV2 is the OCI distribution API: /v2/ answers the version check;
// everything else is validated and passed through to the upstream
// registry.
func (s *Server) serveV2(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		ociError(w, http.StatusMethodNotAllowed, "UNSUPPORTED", "this mirror is read-only")
		return
	}
	rest := strings.TrimPrefix(r.URL.Path, "/v2/")
	if rest == "" {
		s.serveVersionCheck(w, r)
		return
	}
	p := &Pull{Time: time.Now(), Method: r.Method}
	cw := &countingWriter{ResponseWriter: w}
	w = cw
	defer s.finishPull(p, cw)
	rt, code, msg := parseV2(rest)
	if code != "" {
		status := http.StatusBadRequest
		if code == "NAME_UNKNOWN" {
			status = http.StatusNotFound
		}
		ociError(w, status, code, msg)
		return
	}
	p.Repo, p.Kind, p.Ref = rt.name, rt.kind, rt.ref
	reg, err := s.registryFor(r)
	if err != nil {
		ociError(w, http.StatusBadRequest, "UNSUPPORTED", err.Error())
		return
	}
	p.Registry = reg
	path := "/v2/" + rt.name + "/" + rt.kind + "/" + rt.ref
	q := url.Values{}
	for _, k := range forwardedQuery[rt.kind] {
		if v := r.URL.Query().Get(k); v != "" {
			q.Set(k, v)
		}
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	ref := registry.Ref{Registry: reg, Repo: rt.name, Authorization: r.Header.Get("Authorization")}
	if bs := s.blobs; bs != nil && rt.kind == "blobs" && r.Method == http.MethodGet {
		if blob, err := rafs.ParseDigest(rt.ref); err == nil {
			// Bytes from the node or its peers only to a client the
			// registry would give them to.
			d := s.gate.authorize(r.Context(), ref, "blobs", rt.ref, "")
			s.m.authorize(d)
			if d.allowed {
				p.Served = s.serveBlob(w, r, bs, ref, path, blob)
				return
			}
			p.Served = ServedRefused
			_, msg := refusal(d, reg)
			s.log.Info("mirror request refused", "registry", reg, "repo", rt.name, "blob", rt.ref, "why", msg)
			refuse(w, d, reg)
			return
		}
	}
	if rt.kind == "manifests" && s.manifests != nil {
		p.Served = s.serveManifest(w, r, ref, rt.ref, path)
		return
	}
	if bs := s.blobs; bs != nil && rt.kind == "blobs" && r.Method == http.MethodHead {
		if blob, err := rafs.ParseDigest(rt.ref); err == nil {
			p.Served = s.headBlob(w, r, bs, ref, path, blob)
			return
		}
	}
	p.Served = s.passThrough(w, r, ref, path, nil)
}

// passThrough forwards the request to the origin and its answer back,
// through fw when not nil (a recorder around w), and says what served
// it: the origin, or nobody when it could not be reached.
func (s *Server) passThrough(w http.ResponseWriter, r *http.Request, ref registry.Ref, path string, fw http.ResponseWriter) string {
	if fw == nil {
		fw = w
	}
	n, err := s.up.Forward(r.Context(), fw, r, ref, path)
	s.m.upstreamBytes.Add(float64(n))
	served := ServedOrigin
	if err != nil && n == 0 {
		served = ServedUnreachable
	}
	switch {
	case err == nil:
	case r.Context().Err() != nil:
		s.log.Debug("pass-through ended: the client left", "registry", ref.Registry, "repo", ref.Repo, "path", path, "err", err)
	default:
		// A warning: the client gets a 502 (or a cut body) and may fall
		// back to the registry quietly (containerd does), so that the
		// mirror is bypassed and nothing else would say why.
		s.log.Warn("pass-through to the origin failed", "registry", ref.Registry, "repo", ref.Repo, "path", path, "err", err)
	}
	return served
}

// serveVersionCheck answers GET /v2/ as the registry the request would
// be served from answers it, with the client's credentials: a 401 and
// its challenge reach the client, which is how skopeo, podman and crane
// learn that they must send credentials (they send none otherwise). A
// registry that cannot be reached gets 200 from the mirror, so that
// clients go on to ask for what the node may still serve.
func (s *Server) serveVersionCheck(w http.ResponseWriter, r *http.Request) {
	h := w.Header()
	h.Set("Docker-Distribution-API-Version", "registry/2.0")
	h.Set("Content-Type", "application/json")
	if reg, err := s.registryFor(r); err == nil {
		code, rh, err := s.up.Ping(r.Context(), registry.Ref{Registry: reg, Authorization: r.Header.Get("Authorization")})
		switch {
		case err != nil:
			s.log.Debug("version check: origin unreachable; answering it here", "registry", reg, "err", err)
		case code == http.StatusUnauthorized:
			for _, v := range rh.Values("WWW-Authenticate") {
				h.Add("WWW-Authenticate", v)
			}
			ociError(w, code, "UNAUTHORIZED", "authentication required by "+reg)
			return
		case code != http.StatusOK:
			s.log.Debug("version check: origin answered "+strconv.Itoa(code), "registry", reg)
		}
	}
	w.Write([]byte("{}"))
}

// ociError writes an error in the distribution spec's JSON shape.
func ociError(w http.ResponseWriter, status int, code, msg string) {
	type item struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	body, _ := json.Marshal(struct {
		Errors []item `json:"errors"`
	}{[]item{{code, msg}}})
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(body)))
	w.WriteHeader(status)
	w.Write(body)
}
