package cluster

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"damselfly/rafs"
	"damselfly/rafs/chunkapi"
	rafsimage "damselfly/rafs/image"
	"damselfly/rafs/rafstest"
	regclient "damselfly/rafs/registry"
)

// Private images stay private: docker-registry with htpasswd, a
// scheduler and two peers. An authorised skopeo copy through node A's
// mirror and an authorised mount that reads the RAFS image fill A's cache;
// then nobody without the registry's word gets a byte of the image from
// either node (no credentials, wrong ones, another repository, another
// registry: GET, Range GET, HEAD, batch), while the authorised client
// gets it from node B through peers, not the registry. With the registry
// stopped, the authorised client and the mount read on; the others get a
// clear 403.
func TestPrivateImagesStayPrivate(t *testing.T) {
	c := newCluster(t)
	rafstest.RequireTool(t, "skopeo")
	im := pushImage(t, c.reg, "private", sampleImage(), rafs.MinChunkSize)
	const user, pass = "alice", "s3cret-pw"
	c.reg.requireAuth(user, pass)
	good := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+pass))
	wrong := "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":guess"))

	a := c.addNode("a", "")
	b := c.addNode("b", "")
	// The mounts and this test's own registry client take credentials
	// from a docker config, as on a real node.
	dockerConfig(t, good, a.gate.host, b.gate.host)

	// The authorised pull through A, and the authorised mount on A.
	skopeoCopyAs(t, a, im, user+":"+pass)
	m := a.mount(im, "")
	m.equalSource(im)
	// The scheduler knows A's pieces before node B is asked for them.
	_, _, pieces := plainBlobs(t, im)
	c.waitHeld(a, pieces)

	layers := layerDigests(t, im)
	rblob, rchunks := rafsChunks(t, im, a.gate.host)
	private := make([][]byte, 0, len(layers))
	for _, l := range layers {
		private = append(private, blobBytes(t, im, l))
	}

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ln.Close()
	nowhere := "http://" + ln.Addr().String() // no registry there
	type attacker struct {
		name     string
		authz    string
		repo     string
		registry string // X-Damselfly-Registry, "" for the default
	}
	attackers := []attacker{
		{"no credentials", "", im.repo, ""},
		{"wrong password", wrong, im.repo, ""},
		{"forged token", "Bearer forged", im.repo, ""},
		{"another repository, no credentials", "", "cluster/other", ""},
		{"another repository, right credentials", good, "cluster/other", ""},
		{"another registry", good, im.repo, nowhere},
	}
	for _, n := range []*node{a, b} {
		for _, at := range attackers {
			for i, l := range layers {
				path := "/v2/" + at.repo + "/blobs/" + l
				for _, method := range []string{"GET", "Range GET", "HEAD"} {
					hdr := map[string]string{}
					if at.authz != "" {
						hdr["Authorization"] = at.authz
					}
					if at.registry != "" {
						hdr[chunkapi.HeaderRegistry] = at.registry
					}
					verb := method
					if method == "Range GET" {
						verb, hdr["Range"] = http.MethodGet, "bytes=16-4111"
					}
					code, body := mirrorDo(t, n, verb, path, hdr)
					if code == http.StatusOK || code == http.StatusPartialContent || leaks(body, private[i]) {
						t.Errorf("node %s, %s, %s %s: got %d with %d body bytes; want a refusal and no byte of the blob",
							n.name, at.name, method, l[:19], code, len(body))
					}
				}
			}
			up := regclient.Ref{Registry: "http://" + n.gate.host, Repo: at.repo, Authorization: at.authz}
			if at.registry != "" {
				up.Registry = at.registry
			}
			got, err := batchRead(t, n, up, rblob, rchunks)
			if got != 0 || err == nil {
				t.Errorf("node %s, %s, batch: got %d chunks (err %v); want none", n.name, at.name, got, err)
			}
		}
	}

	// The authorised client on B: every layer byte for byte, from A's
	// pieces and cache, none from the registry.
	before := b.gate.blobGets.Load()
	for i, l := range layers {
		code, body := mirrorDo(t, b, http.MethodGet, "/v2/"+im.repo+"/blobs/"+l, map[string]string{"Authorization": good})
		if code != http.StatusOK || !bytes.Equal(body, private[i]) {
			t.Errorf("authorised GET of layer %d on node B: got %d and %d bytes, want 200 and the layer's %d", i, code, len(body), len(private[i]))
		}
	}
	got, err := batchRead(t, b, regclient.Ref{Registry: "http://" + b.gate.host, Repo: im.repo, Authorization: good}, rblob, rchunks)
	if err != nil || got != len(rchunks) {
		t.Errorf("authorised batch on node B: %d of %d chunks, err %v", got, len(rchunks), err)
	}
	if n := b.gate.blobGets.Load() - before; n != 0 {
		t.Errorf("node B's authorised reads sent %d blob GETs to the registry, want 0 (the registry is only asked, by HEAD)", n)
	}

	// A mount on B made while the registry is up reads through the outage
	// on its grants; the authorised client on B reads on; the others are
	// refused with a 403 that says why.
	mb := b.mount(im, "")
	c.reg.down()
	mb.equalSource(im)
	code, body := mirrorDo(t, b, http.MethodGet, "/v2/"+im.repo+"/blobs/"+layers[0], map[string]string{"Authorization": good})
	if code != http.StatusOK || !bytes.Equal(body, private[0]) {
		t.Errorf("authorised GET on node B with the registry down: got %d and %d bytes, want 200 and the layer", code, len(body))
	}
	for _, n := range []*node{a, b} {
		for _, authz := range []string{"", wrong} {
			hdr := map[string]string{}
			if authz != "" {
				hdr["Authorization"] = authz
			}
			code, body := mirrorDo(t, n, http.MethodGet, "/v2/"+im.repo+"/blobs/"+layers[0], hdr)
			// 403 for "the registry cannot be asked", or, for a few
			// seconds after it refused this client, the registry's own
			// 401.
			if (code != http.StatusForbidden && code != http.StatusUnauthorized) || !strings.Contains(string(body), "not authorised") || leaks(body, private[0]) {
				t.Errorf("node %s, credentials %v, registry down: got %d %.200q; want 401 or 403 saying it is not authorised", n.name, authz != "", code, body)
			}
			up := regclient.Ref{Registry: "http://" + n.gate.host, Repo: im.repo, Authorization: authz}
			if got, err := batchRead(t, n, up, rblob, rchunks); got != 0 || err == nil || !strings.Contains(err.Error(), "not authorised") {
				t.Errorf("node %s, credentials %v, registry down, batch: got %d chunks, err %v; want a refusal saying it is not authorised", n.name, authz != "", got, err)
			}
		}
	}
}

// dockerConfig points DOCKER_CONFIG (for this process and the daemons it
// starts from now on) at a config with authz for hosts.
func dockerConfig(t *testing.T, authz string, hosts ...string) {
	t.Helper()
	dir := t.TempDir()
	auths := map[string]any{}
	for _, h := range hosts {
		auths[h] = map[string]string{"auth": strings.TrimPrefix(authz, "Basic ")}
	}
	data, _ := json.Marshal(map[string]any{"auths": auths})
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("DOCKER_CONFIG", dir)
}

// skopeoCopyAs is skopeoCopy with credentials ("user:pass").
func skopeoCopyAs(t *testing.T, n *node, im *image, creds string) {
	t.Helper()
	dst := filepath.Join(t.TempDir(), "copy")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mirror := strings.TrimPrefix(n.proxy, "http://")
	out, err := exec.CommandContext(ctx, "skopeo", "copy", "--src-tls-verify=false", "--src-creds", creds,
		"docker://"+mirror+"/"+im.repo+":plain", "oci:"+dst+":copy").CombinedOutput()
	if err != nil {
		t.Fatalf("skopeo copy --src-creds through node %s's mirror: %v\n%s", n.name, err, out)
	}
}

// layerDigests lists the source image's layer digests.
func layerDigests(t *testing.T, im *image) []string {
	t.Helper()
	var index struct {
		Manifests []struct{ Digest string } `json:"manifests"`
	}
	var m struct {
		Layers []struct{ Digest string } `json:"layers"`
	}
	readJSONFile(t, filepath.Join(im.layout, "index.json"), &index)
	readJSONFile(t, filepath.Join(im.layout, "blobs", "sha256", strings.TrimPrefix(index.Manifests[0].Digest, "sha256:")), &m)
	var ds []string
	for _, l := range m.Layers {
		ds = append(ds, l.Digest)
	}
	if len(ds) == 0 {
		t.Fatal("source image has no layers")
	}
	return ds
}

func readJSONFile(t *testing.T, p string, v any) {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, v); err != nil {
		t.Fatalf("%s: %v", p, err)
	}
}

// blobBytes reads a blob of the source layout.
func blobBytes(t *testing.T, im *image, digest string) []byte {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(im.layout, "blobs", "sha256", strings.TrimPrefix(digest, "sha256:")))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// rafsChunks opens the RAFS image (with the docker config's credentials)
// and returns its first blob and up to 16 of that blob's chunks.
func rafsChunks(t *testing.T, im *image, host string) (rafs.Digest, []rafs.Chunk) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	img, err := rafsimage.Open(ctx, im.ref(host, "rafs"), rafsimage.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer img.Close()
	boot := img.Bootstrap()
	blob, err := boot.Blob(0)
	if err != nil {
		t.Fatal(err)
	}
	var chunks []rafs.Chunk
	for i := range boot.ChunkCount() {
		ch, err := boot.Chunk(i)
		if err != nil {
			t.Fatal(err)
		}
		if ch.Blob == 0 && len(chunks) < 16 {
			chunks = append(chunks, ch)
		}
	}
	if len(chunks) == 0 {
		t.Fatal("no chunks in blob 0")
	}
	return blob.Digest, chunks
}

// mirrorDo sends one request to node n's mirror.
func mirrorDo(t *testing.T, n *node, method, path string, hdr map[string]string) (int, []byte) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, method, n.proxy+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s on node %s: %v", method, path, n.name, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil && !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("%s %s on node %s: body: %v", method, path, n.name, err)
	}
	return resp.StatusCode, body
}

// batchRead reads chunks through n's batch endpoint and returns how many
// arrived.
func batchRead(t *testing.T, n *node, up regclient.Ref, blob rafs.Digest, chunks []rafs.Chunk) (int, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	got := 0
	err := chunkapi.NewClient(n.proxy, nil).ReadChunks(ctx, up, blob, chunks, func(int, rafs.Chunk, []byte) error {
		got++
		return nil
	})
	return got, err
}

// leaks reports whether body holds a run of 64 bytes of secret.
func leaks(body, secret []byte) bool {
	if len(body) < 64 {
		return false
	}
	for off := 0; off+64 <= len(secret); off += 1024 {
		if bytes.Contains(body, secret[off:off+64]) {
			return true
		}
	}
	return false
}
