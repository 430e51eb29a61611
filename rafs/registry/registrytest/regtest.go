// Package registrytest runs registries for tests of the registry client
// and of its users: go-containerregistry's in-process registry under
// httptest, optionally behind a bearer-token server, with a hook to
// inject faults. It is test support only.
package registrytest

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/static"
	"github.com/google/go-containerregistry/pkg/v1/types"

	"damselfly/rafs"
)

// Auth makes a Registry demand a bearer token, as Docker Hub does.
type Auth struct {
	// User and Pass are the credentials the token endpoint accepts.
	User, Pass string
	// Anonymous lets the token endpoint give tokens without credentials.
	Anonymous bool
	// Allow, if set, decides per repository: user is User for a token
	// got with the credentials, "" for an anonymous one (AnonToken). A
	// request it refuses gets 404 NAME_UNKNOWN, as registries answer for
	// a repository the token does not reach. nil allows every
	// repository to every token.
	Allow func(user, repo string) bool
}

// AnonToken is the token given without credentials when Auth.Allow is
// set (without Allow, anonymous requests get Token).
const AnonToken = "regtest-token-anon"

// Token is the bearer token the token endpoint issues.
const Token = "regtest-token-1"

// Registry is a running test registry.
type Registry struct {
	// URL is its base URL, "http://127.0.0.1:PORT"; Host is "127.0.0.1:PORT".
	URL, Host string
	// TokenFetches counts tokens issued.
	TokenFetches atomic.Int32

	auth      *Auth
	inner     http.Handler
	links     sync.Map // repo + "@" + digest -> true: blobs pushed to or mounted in repo
	intercept atomic.Pointer[func(w http.ResponseWriter, r *http.Request) bool]
}

// SetIntercept installs f to see every request first; f returning true
// means it answered. nil removes it. Safe while requests are served.
func (r *Registry) SetIntercept(f func(w http.ResponseWriter, r *http.Request) bool) {
	if f == nil {
		r.intercept.Store(nil)
		return
	}
	r.intercept.Store(&f)
}

// New starts a registry, closed in t.Cleanup. auth nil means open.
func New(t testing.TB, auth *Auth) *Registry {
	t.Helper()
	r := &Registry{auth: auth, inner: registry.New(registry.Logger(log.New(io.Discard, "", 0)), registry.WithReferrersSupport(true))}
	srv := httptest.NewServer(r)
	t.Cleanup(srv.Close)
	r.URL = srv.URL
	r.Host = strings.TrimPrefix(srv.URL, "http://")
	return r
}

// BasicAuth is the Authorization value of the registry's credentials.
func (r *Registry) BasicAuth() string {
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(r.auth.User+":"+r.auth.Pass))
}

func (r *Registry) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	if f := r.intercept.Load(); f != nil && (*f)(w, req) {
		return
	}
	if r.auth == nil {
		r.inner.ServeHTTP(w, req)
		return
	}
	if req.URL.Path == "/token" {
		user, pass, ok := req.BasicAuth()
		if !(ok && user == r.auth.User && pass == r.auth.Pass) && !(!ok && r.auth.Anonymous) {
			http.Error(w, "bad credentials", http.StatusUnauthorized)
			return
		}
		r.TokenFetches.Add(1)
		tok := Token
		if !ok && r.auth.Allow != nil {
			tok = AnonToken
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(map[string]any{"token": tok, "expires_in": 300})
		return
	}
	authz := req.Header.Get("Authorization")
	if r.auth.Allow != nil && (authz == "Bearer "+Token || authz == "Bearer "+AnonToken) {
		user := r.auth.User
		if authz == "Bearer "+AnonToken {
			user = ""
		}
		repo := repoOf(req.URL.Path)
		if repo != "" && !r.auth.Allow(user, repo) {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"errors":[{"code":"NAME_UNKNOWN","message":"repository name not known to registry"}]}`))
			return
		}
		r.serveLinked(w, req, repo)
		return
	}
	if authz != "Bearer "+Token {
		w.Header().Set("WWW-Authenticate", fmt.Sprintf(`Bearer realm="http://%s/token",service="regtest"`, req.Host))
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusUnauthorized)
		w.Write([]byte(`{"errors":[{"code":"UNAUTHORIZED","message":"authentication required"}]}`))
		return
	}
	r.inner.ServeHTTP(w, req)
}

// serveLinked serves req as a registry that keeps blobs per repository
// (as distribution does; go-containerregistry's in-memory one keeps them
// in one pool): a blob is found only in a repository it was pushed to or
// mounted in.
func (r *Registry) serveLinked(w http.ResponseWriter, req *http.Request, repo string) {
	path := req.URL.Path
	if i := strings.LastIndex(path, "/blobs/"); i >= 0 && (req.Method == http.MethodGet || req.Method == http.MethodHead) &&
		!strings.Contains(path[i:], "/uploads") {
		if _, ok := r.links.Load(repo + "@" + path[i+len("/blobs/"):]); !ok {
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusNotFound)
			w.Write([]byte(`{"errors":[{"code":"BLOB_UNKNOWN","message":"blob unknown to registry"}]}`))
			return
		}
	}
	sw := &statusWriter{ResponseWriter: w}
	r.inner.ServeHTTP(sw, req)
	q := req.URL.Query()
	switch {
	case sw.code == http.StatusCreated && req.Method == http.MethodPut && q.Get("digest") != "":
		r.links.Store(repo+"@"+q.Get("digest"), true)
	case sw.code == http.StatusCreated && req.Method == http.MethodPost && q.Get("mount") != "":
		r.links.Store(repo+"@"+q.Get("mount"), true)
	}
}

type statusWriter struct {
	http.ResponseWriter
	code int
}

func (w *statusWriter) WriteHeader(code int) {
	w.code = code
	w.ResponseWriter.WriteHeader(code)
}

// repoOf is the repository of a /v2/NAME/(blobs|manifests|tags|referrers)/...
// path, "" for others.
func repoOf(path string) string {
	rest, ok := strings.CutPrefix(path, "/v2/")
	if !ok {
		return ""
	}
	parts := strings.Split(rest, "/")
	for i := len(parts) - 2; i > 0; i-- {
		switch parts[i] {
		case "blobs", "manifests", "tags", "referrers":
			return strings.Join(parts[:i], "/")
		}
	}
	return ""
}

// options authenticate pushes.
func (r *Registry) options() []remote.Option {
	opts := []remote.Option{}
	if r.auth != nil {
		opts = append(opts, remote.WithAuth(&basic{r.auth.User, r.auth.Pass}))
	}
	return opts
}

// PushBlob stores data as a blob of repo and returns its digest.
func (r *Registry) PushBlob(t testing.TB, repo string, data []byte) rafs.Digest {
	t.Helper()
	ref, err := name.NewRepository(r.Host+"/"+repo, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	l := static.NewLayer(data, types.MediaType(rafs.MediaTypeBlob))
	if err := remote.WriteLayer(ref, l, r.options()...); err != nil {
		t.Fatalf("push blob: %v", err)
	}
	h, _ := l.Digest()
	d, err := rafs.ParseDigest(h.String())
	if err != nil {
		t.Fatal(err)
	}
	return d
}

// PushImage pushes a small random image as repo:tag and returns its
// manifest bytes, the manifest digest and the image.
func (r *Registry) PushImage(t testing.TB, repo, tag string) ([]byte, string, v1.Image) {
	t.Helper()
	img, err := random.Image(2048, 2)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := name.NewTag(r.Host+"/"+repo+":"+tag, name.Insecure)
	if err != nil {
		t.Fatal(err)
	}
	if err := remote.Write(ref, img, r.options()...); err != nil {
		t.Fatalf("push image: %v", err)
	}
	raw, err := img.RawManifest()
	if err != nil {
		t.Fatal(err)
	}
	d, _ := img.Digest()
	if !bytes.Contains(raw, []byte("layers")) {
		t.Fatal("manifest without layers")
	}
	return raw, d.String(), img
}
