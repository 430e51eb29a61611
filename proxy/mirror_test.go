package proxy_test

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"damselfly/proxy"
	"damselfly/rafs/chunkapi"
	"damselfly/rafs/registry"
	"damselfly/rafs/registry/registrytest"
)

func TestPingHealthMetrics(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	code, hdr, _ := e.do(t, http.MethodGet, "/v2/", nil)
	if code != http.StatusOK || hdr.Get("Docker-Distribution-API-Version") != "registry/2.0" {
		t.Errorf("GET /v2/: got %d %v, want 200 with the API version header", code, hdr)
	}
	code, _, body := e.do(t, http.MethodGet, "/healthz", nil)
	if code != http.StatusOK || string(body) != "ok" {
		t.Errorf("GET /healthz: got %d %q, want 200 ok", code, body)
	}
	code, _, body = e.do(t, http.MethodGet, "/metrics", nil)
	if code != http.StatusOK || !contains(string(body), `damselfly_proxy_requests_total{code="200",route="healthz"} 1`) {
		t.Errorf("GET /metrics: got %d, body without the healthz request count:\n%s", code, body)
	}
}

func TestPassThrough(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	manifest, mdigest, img := e.reg.PushImage(t, "library/app", "v1")
	layers, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	ld, _ := layers[0].Digest()
	lrc, _ := layers[0].Compressed()
	var layer bytes.Buffer
	layer.ReadFrom(lrc)
	lrc.Close()

	accept := map[string]string{"Accept": "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json"}
	for _, ref := range []string{"v1", mdigest} {
		code, hdr, body := e.do(t, http.MethodGet, "/v2/library/app/manifests/"+ref, accept)
		if code != http.StatusOK || !bytes.Equal(body, manifest) {
			t.Errorf("manifest %s: got %d, %d bytes; want 200 and the pushed manifest", ref, code, len(body))
		}
		if hdr.Get("Docker-Content-Digest") != mdigest || hdr.Get("Content-Type") == "" {
			t.Errorf("manifest %s: headers %v, want digest %s and a content type", ref, hdr, mdigest)
		}
	}
	code, hdr, _ := e.do(t, http.MethodHead, "/v2/library/app/manifests/v1", accept)
	if code != http.StatusOK || hdr.Get("Content-Length") != itoa(len(manifest)) {
		t.Errorf("HEAD manifest: got %d, Content-Length %q; want 200, %d", code, hdr.Get("Content-Length"), len(manifest))
	}

	code, _, body := e.do(t, http.MethodGet, "/v2/library/app/blobs/"+ld.String(), nil)
	if code != http.StatusOK || !bytes.Equal(body, layer.Bytes()) {
		t.Errorf("blob: got %d, %d bytes; want 200, the layer's %d", code, len(body), layer.Len())
	}
	code, hdr, body = e.do(t, http.MethodGet, "/v2/library/app/blobs/"+ld.String(), map[string]string{"Range": "bytes=100-1099"})
	if code != http.StatusPartialContent || !bytes.Equal(body, layer.Bytes()[100:1100]) || !strings.HasPrefix(hdr.Get("Content-Range"), "bytes 100-1099/") {
		t.Errorf("blob range: got %d, %d bytes, Content-Range %q; want 206 and bytes 100-1099", code, len(body), hdr.Get("Content-Range"))
	}

	code, _, body = e.do(t, http.MethodGet, "/v2/library/app/tags/list", nil)
	var tags struct{ Tags []string }
	json.Unmarshal(body, &tags)
	if code != http.StatusOK || len(tags.Tags) != 1 || tags.Tags[0] != "v1" {
		t.Errorf("tags: got %d %s, want [v1]", code, body)
	}

	// 404 stays 404.
	for _, p := range []string{"/v2/library/app/manifests/nope", "/v2/library/app/blobs/sha256:" + strings.Repeat("0", 64), "/v2/other/manifests/v1"} {
		if code, _, _ := e.do(t, http.MethodGet, p, accept); code != http.StatusNotFound {
			t.Errorf("GET %s: got %d, want 404", p, code)
		}
	}
	if got := testMetric(t, e, "damselfly_proxy_upstream_passthrough_bytes_total"); got < float64(layer.Len()) {
		t.Errorf("pass-through bytes metric: got %v, want at least %d", got, layer.Len())
	}
}

func TestBadRequests(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	hex := strings.Repeat("a", 64)
	for _, tc := range []struct {
		method, path string
		hdr          map[string]string
		want         int
	}{
		{"GET", "/v2/UPPER/manifests/latest", nil, 400},
		{"GET", "/v2/a..b/manifests/latest", nil, 400},
		{"GET", "/v2/app/manifests/bad:tag", nil, 400},
		{"GET", "/v2/app/blobs/sha256:xyz", nil, 400},
		{"GET", "/v2/app/blobs/sha256:" + strings.ToUpper(hex), nil, 400},
		{"GET", "/v2/app/referrers/latest", nil, 400},
		{"GET", "/v2/app/manifests/latest", map[string]string{chunkapi.HeaderRegistry: "ftp://x"}, 400},
		{"GET", "/v2/app/manifests/latest", map[string]string{chunkapi.HeaderRegistry: "http://192.0.2.1:5000"}, 400},
		{"GET", "/v2/app/manifests/latest?ns=bad/host", nil, 400},
		{"GET", "/v2/app/other/x", nil, 404},
		{"GET", "/v2/app", nil, 404},
		{"POST", "/v2/app/blobs/uploads/", nil, 405},
		{"DELETE", "/v2/app/manifests/latest", nil, 405},
	} {
		if code, _, body := e.do(t, tc.method, tc.path, tc.hdr); code != tc.want {
			t.Errorf("%s %s %v: got %d %s, want %d", tc.method, tc.path, tc.hdr, code, body, tc.want)
		}
	}
}

func TestRegistryRouting(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{})
	other := registrytest.New(t, nil) // not the proxy's default
	manifest, _, _ := other.PushImage(t, "routed/app", "r1")
	// ?ns= names a host; a loopback one speaks plain HTTP unlisted.
	e2 := newEnv(t, envOptions{upCfg: func(c *registry.Config) { c.PlainHTTP = []string{other.Host} }})

	for _, tc := range []struct {
		name string
		e    *env
		path string
		hdr  map[string]string
	}{
		{"ns", e2, "/v2/routed/app/manifests/r1?ns=" + other.Host, nil},
		{"ns loopback unlisted", e, "/v2/routed/app/manifests/r1?ns=" + other.Host, nil},
		{"damselfly header", e, "/v2/routed/app/manifests/r1", map[string]string{chunkapi.HeaderRegistry: other.URL}},
		{"dragonfly header", e, "/v2/routed/app/manifests/r1", map[string]string{proxy.HeaderDragonflyRegistry: other.URL}},
		{"ns wins", e2, "/v2/routed/app/manifests/r1?ns=" + other.Host, map[string]string{chunkapi.HeaderRegistry: e.reg.URL}},
	} {
		code, _, body := tc.e.do(t, http.MethodGet, tc.path, tc.hdr)
		if code != http.StatusOK || !bytes.Equal(body, manifest) {
			t.Errorf("%s: got %d %q, want 200 and the other registry's manifest", tc.name, code, body)
		}
	}
	// Without routing the default registry answers, which lacks it.
	if code, _, _ := e.do(t, http.MethodGet, "/v2/routed/app/manifests/r1", nil); code != http.StatusNotFound {
		t.Errorf("default registry: got %d, want 404", code)
	}
	// Without a default registry a request naming none is refused, and
	// says why.
	none := newEnv(t, envOptions{upCfg: func(c *registry.Config) { c.DefaultRegistry = "" }})
	code, _, body := none.do(t, http.MethodGet, "/v2/routed/app/manifests/r1", nil)
	if code != http.StatusBadRequest || !strings.Contains(string(body), "default_registry") {
		t.Errorf("no registry named, none configured: got %d %q, want 400 naming default_registry", code, body)
	}
	if code, _, _ := none.do(t, http.MethodGet, "/v2/routed/app/manifests/r1?ns="+other.Host, nil); code != http.StatusOK {
		t.Errorf("no default registry, ?ns= given: got %d, want 200", code)
	}
}

func TestAuthChallengeRelayed(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{auth: &registrytest.Auth{User: "alice", Pass: "pw"}})
	manifest, _, _ := e.reg.PushImage(t, "private/app", "v1")

	code, hdr, _ := e.do(t, http.MethodGet, "/v2/private/app/manifests/v1", nil)
	chal := hdr.Get("WWW-Authenticate")
	if code != http.StatusUnauthorized || !strings.HasPrefix(chal, "Bearer realm=") {
		t.Fatalf("without credentials: got %d, challenge %q; want 401 with the registry's bearer challenge", code, chal)
	}
	// Answer the challenge as a client would: fetch a token from the realm.
	realm := strings.TrimPrefix(strings.SplitN(chal, ",", 2)[0], "Bearer realm=")
	realm = strings.Trim(realm, `"`)
	req, _ := http.NewRequestWithContext(testCtx(t), http.MethodGet, realm, nil)
	req.SetBasicAuth("alice", "pw")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var tok struct{ Token string }
	json.NewDecoder(resp.Body).Decode(&tok)
	resp.Body.Close()
	if tok.Token == "" {
		t.Fatal("no token from the realm")
	}
	code, _, body := e.do(t, http.MethodGet, "/v2/private/app/manifests/v1", map[string]string{"Authorization": "Bearer " + tok.Token})
	if code != http.StatusOK || !bytes.Equal(body, manifest) {
		t.Errorf("with the token: got %d, want 200 and the manifest", code)
	}
	// A wrong token or password is the client's problem: 401 again, with
	// the challenge.
	for _, authz := range []string{"Bearer wrong", "Basic " + base64.StdEncoding.EncodeToString([]byte("alice:wrong"))} {
		code, hdr, _ := e.do(t, http.MethodGet, "/v2/private/app/manifests/v1", map[string]string{"Authorization": authz})
		if code != http.StatusUnauthorized || !strings.HasPrefix(hdr.Get("WWW-Authenticate"), "Bearer ") {
			t.Errorf("Authorization %q: got %d, challenge %q; want 401 with the challenge", authz, code, hdr.Get("WWW-Authenticate"))
		}
	}
	// Client Basic credentials are traded for a token by the proxy.
	code, _, body = e.do(t, http.MethodGet, "/v2/private/app/manifests/v1", map[string]string{"Authorization": e.reg.BasicAuth()})
	if code != http.StatusOK || !bytes.Equal(body, manifest) {
		t.Errorf("client basic credentials: got %d, want 200 and the manifest", code)
	}
}

func TestNodeCredentials(t *testing.T) {
	t.Parallel()
	cfgFile := filepath.Join(t.TempDir(), "config.json")
	e := newEnv(t, envOptions{
		auth:  &registrytest.Auth{User: "node", Pass: "pw"},
		upCfg: func(c *registry.Config) { c.DockerConfigFile = cfgFile },
	})
	manifest, _, _ := e.reg.PushImage(t, "private/app", "v1")
	if code, _, _ := e.do(t, http.MethodGet, "/v2/private/app/manifests/v1", nil); code != http.StatusUnauthorized {
		t.Errorf("before the config file exists: got %d, want 401", code)
	}
	auth := strings.TrimPrefix(e.reg.BasicAuth(), "Basic ")
	if err := os.WriteFile(cfgFile, []byte(`{"auths":{"`+e.reg.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	if code, _, _ := e.do(t, http.MethodGet, "/v2/private/app/manifests/v1", nil); code != http.StatusUnauthorized {
		t.Errorf("node credentials not lent: got %d, want 401", code)
	}

	// Lent to this registry only: the same request gets the manifest.
	lent := newEnv(t, envOptions{
		auth: &registrytest.Auth{User: "node", Pass: "pw"},
		upCfg: func(c *registry.Config) {
			c.DockerConfigFile = cfgFile
			c.LendNodeCredentials = []string{strings.TrimPrefix(c.DefaultRegistry, "http://")}
		},
	})
	manifest, _, _ = lent.reg.PushImage(t, "private/app", "v1")
	auth = strings.TrimPrefix(lent.reg.BasicAuth(), "Basic ")
	if err := os.WriteFile(cfgFile, []byte(`{"auths":{"`+lent.reg.Host+`":{"auth":"`+auth+`"}}}`), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, body := lent.do(t, http.MethodGet, "/v2/private/app/manifests/v1", nil)
	if code != http.StatusOK || !bytes.Equal(body, manifest) {
		t.Errorf("with node credentials lent: got %d, want 200 and the manifest", code)
	}
}

func TestPassThroughUpstreamFailures(t *testing.T) {
	t.Parallel()
	e := newEnv(t, envOptions{upCfg: func(c *registry.Config) { c.RetryLimit = 2 }})
	manifest, _, _ := e.reg.PushImage(t, "app", "v1")
	var fails atomic.Int32
	fails.Store(2)
	e.reg.SetIntercept(func(w http.ResponseWriter, r *http.Request) bool {
		if fails.Add(-1) >= 0 {
			w.Header().Set("Retry-After", "0")
			http.Error(w, "restarting", http.StatusServiceUnavailable)
			return true
		}
		return false
	})
	code, _, body := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil)
	if code != http.StatusOK || !bytes.Equal(body, manifest) {
		t.Errorf("two 503s then success, RetryLimit 2: got %d, want 200 and the manifest", code)
	}
	fails.Store(10)
	if code, _, _ := e.do(t, http.MethodGet, "/v2/app/manifests/v1", nil); code != http.StatusServiceUnavailable {
		t.Errorf("503s beyond RetryLimit: got %d, want the origin's 503", code)
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close() // nothing listens there now
	code, _, _ = e.do(t, http.MethodGet, "/v2/app/manifests/v1", map[string]string{chunkapi.HeaderRegistry: "http://" + ln.Addr().String()})
	if code != http.StatusBadGateway {
		t.Errorf("unreachable origin: got %d, want 502", code)
	}
}
