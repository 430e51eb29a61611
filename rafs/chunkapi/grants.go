package chunkapi

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// GrantsPath is the endpoint where a client asks for the grants of
// several blobs at once (authz.go): a mount daemon does at mount time,
// while the registry is up, so that it can read every blob of its image
// through a later outage, not only those it had read before it.
const GrantsPath = "/api/v1/grants"

// Grants request limits.
const (
	// MaxGrantsRequest bounds the JSON body.
	MaxGrantsRequest = 64 << 10
	// MaxGrantBlobs bounds the blobs of one grants request.
	MaxGrantBlobs = 256
)

// GrantsRequest is the JSON body of a grants request.
type GrantsRequest struct {
	Repo  string   `json:"repo"`
	Blobs []string `json:"blobs"`
}

// GrantsResponse is its answer: a grant per blob the registry allows
// the client to read, and why for the others.
type GrantsResponse struct {
	Grants  map[string]string `json:"grants"`
	Refused map[string]string `json:"refused,omitempty"`
}

// ParseGrantsRequest decodes and checks a grants request body: one JSON
// object with exactly the documented fields, a valid repository name and
// 1..MaxGrantBlobs digests.
func ParseGrantsRequest(data []byte) (string, []rafs.Digest, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	var req GrantsRequest
	if err := dec.Decode(&req); err != nil {
		return "", nil, fmt.Errorf("request body: %w", err)
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return "", nil, errors.New("request body: data after the JSON object")
	}
	if !registry.ValidRepo(req.Repo) {
		return "", nil, fmt.Errorf("repo %s: not a repository name", registry.Quote(req.Repo))
	}
	if len(req.Blobs) == 0 || len(req.Blobs) > MaxGrantBlobs {
		return "", nil, fmt.Errorf("%d blobs: want 1..%d", len(req.Blobs), MaxGrantBlobs)
	}
	blobs := make([]rafs.Digest, len(req.Blobs))
	for i, b := range req.Blobs {
		d, err := rafs.ParseDigest(b)
		if err != nil {
			return "", nil, fmt.Errorf("blob %d %s: %w", i, registry.Quote(b), err)
		}
		blobs[i] = d
	}
	return req.Repo, blobs, nil
}

// Authorize asks the proxy for grants for blobs of up's repository, with
// up's credentials, and keeps those it gives: later reads of those blobs
// send them, so that they go on while the registry is down. It returns
// an error naming the blobs the proxy refused, if any (the others'
// grants are kept all the same).
func (cc *Client) Authorize(ctx context.Context, up registry.Ref, blobs []rafs.Digest) error {
	if len(blobs) == 0 {
		return nil
	}
	var errs []error
	for start := 0; start < len(blobs); start += MaxGrantBlobs {
		part := blobs[start:min(start+MaxGrantBlobs, len(blobs))]
		if err := cc.authorize(ctx, up, part); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func (cc *Client) authorize(ctx context.Context, up registry.Ref, blobs []rafs.Digest) error {
	req := GrantsRequest{Repo: up.Repo}
	for _, b := range blobs {
		req.Blobs = append(req.Blobs, b.String())
	}
	body, _ := json.Marshal(req)
	url := strings.TrimSuffix(cc.url, BatchPath) + GrantsPath
	hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return err
	}
	hreq.Header.Set("Content-Type", "application/json")
	if up.Registry != "" {
		hreq.Header.Set(HeaderRegistry, up.Registry)
	}
	if up.Authorization != "" {
		hreq.Header.Set("Authorization", up.Authorization)
	}
	resp, err := cc.hc.Do(hreq)
	if err != nil {
		return fmt.Errorf("grants: %w", err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("grants: %w", err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("grants: proxy answered %d: %s", resp.StatusCode, bytes.TrimSpace(data[:min(len(data), MaxErrorMessage)]))
	}
	var gr GrantsResponse
	if err := json.Unmarshal(data, &gr); err != nil {
		return fmt.Errorf("grants: %w", err)
	}
	var refused []string
	for _, b := range blobs {
		if g, ok := gr.Grants[b.String()]; ok {
			cc.keepGrant(grantKey{up.Registry, up.Repo, b}, g)
		} else {
			refused = append(refused, fmt.Sprintf("%s: %s", b, gr.Refused[b.String()]))
		}
	}
	if len(refused) > 0 {
		return fmt.Errorf("grants refused: %s", strings.Join(refused, "; "))
	}
	return nil
}
