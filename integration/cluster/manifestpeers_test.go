package cluster

import (
	"crypto/sha256"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/random"
	"github.com/google/go-containerregistry/pkg/v1/remote"

	"damselfly/proxy"
)

// Scenario (issue 21, item 2): with the registry down, a node's mirror
// answers for manifests it does not hold from other peers. Node B
// resolves tag v1 while it names the first image; the tag is pushed
// anew and node A resolves it. With the registry stopped, B's mirror
// serves v1 as the cluster last saw it (A's younger resolution, and
// the manifest from A), marked stale, and the new manifest by digest.
// Node C, which nothing went through before the outage, serves it to an
// anonymous client because its peers saw the registry let anonymous
// clients pull from the repository (proxy tests hold the refusals:
// credentials, private repositories, verdicts past auth_stale).
func TestManifestsFromPeersInOutage(t *testing.T) {
	c := newCluster(t)
	repo := c.reg.host + "/team/app:v1"
	push := func() string {
		img, err := random.Image(1024, 1)
		if err != nil {
			t.Fatal(err)
		}
		ref, err := name.ParseReference(repo, name.Insecure)
		if err != nil {
			t.Fatal(err)
		}
		if err := remote.Write(ref, img, remote.WithContext(t.Context())); err != nil {
			t.Fatal(err)
		}
		d, err := img.Digest()
		if err != nil {
			t.Fatal(err)
		}
		return d.String()
	}
	a, b, fresh := c.addNode("a", ""), c.addNode("b", ""), c.addNode("c", "")
	get := func(n *node, object string) (int, http.Header, string) {
		t.Helper()
		u := fmt.Sprintf("%s/v2/team/app/manifests/%s?ns=%s", n.proxy, object, c.reg.host)
		req, err := http.NewRequestWithContext(t.Context(), http.MethodGet, u, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Accept", "application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.v2+json")
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, resp.Header, fmt.Sprintf("sha256:%x", sha256.Sum256(body))
	}

	d1 := push()
	if code, _, d := get(b, "v1"); code != http.StatusOK || d != d1 {
		t.Fatalf("node B, registry up: got %d %s, want 200 %s", code, d, d1)
	}
	d2 := push()
	if code, _, d := get(a, "v1"); code != http.StatusOK || d != d2 {
		t.Fatalf("node A after the new push: got %d %s, want 200 %s", code, d, d2)
	}

	c.reg.down()
	start := time.Now()
	code, hdr, d := get(b, "v1")
	t.Logf("measured: registry down: node B answered tag v1 from the cluster in %s", time.Since(start).Round(time.Millisecond))
	if code != http.StatusOK || d != d2 {
		t.Fatalf("node B, registry down, by tag: got %d %s, want 200 and A's resolution %s (B's own was %s)\n--- node B's peer:\n%s", code, d, d2, d1, b.p.LogTail(3000))
	}
	if hdr.Get(proxy.HeaderStale) == "" {
		t.Errorf("node B, registry down, by tag: no %s header", proxy.HeaderStale)
	}
	if code, _, d := get(b, d2); code != http.StatusOK || d != d2 {
		t.Errorf("node B, registry down, by digest: got %d %s, want 200 %s", code, d, d2)
	}
	if code, _, d := get(fresh, "v1"); code != http.StatusOK || d != d2 {
		t.Errorf("node C (nothing went through it), anonymous, registry down: got %d %s, want 200 %s", code, d, d2)
	}
}
