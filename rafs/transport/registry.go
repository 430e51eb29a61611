package transport

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	gcrtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// registryReadImage fetches the image r names, resolving an index to the
// platform in opts.
func registryReadImage(ctx context.Context, r Ref, opts Options) (v1.Image, error) {
	ref, err := registryName(r, opts)
	if err != nil {
		return nil, err
	}
	desc, err := remote.Get(ref, opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, classify(err)
	}
	if desc.MediaType.IsIndex() {
		idx, err := desc.ImageIndex()
		if err != nil {
			return nil, err
		}
		return imageForPlatform(idx, opts.platform())
	}
	return desc.Image()
}

// registryReadIndex fetches the index r names, or reports false when r
// names an image.
func registryReadIndex(ctx context.Context, r Ref, opts Options) (v1.ImageIndex, bool, error) {
	ref, err := registryName(r, opts)
	if err != nil {
		return nil, false, err
	}
	desc, err := remote.Get(ref, opts.remoteOptions(ctx)...)
	if err != nil {
		return nil, false, classify(err)
	}
	if !desc.MediaType.IsIndex() {
		return nil, false, nil
	}
	idx, err := desc.ImageIndex()
	if err != nil {
		return nil, false, err
	}
	return idx, true, nil
}

// registryClient is an HTTP client authenticated for pulls from one
// repository. It is safe for concurrent use; go-containerregistry's bearer
// transport renews the token when the registry answers 401.
type registryClient struct {
	repo   name.Repository
	client *http.Client
}

// newRegistryClient pings the registry and obtains a pull token for the
// repository of ref. ctx bounds only this handshake.
func newRegistryClient(ctx context.Context, ref name.Reference, opts Options) (*registryClient, error) {
	repo := ref.Context()
	auth, err := authn.Resolve(ctx, opts.keychain(), repo)
	if err != nil {
		return nil, fmt.Errorf("resolve credentials for %s: %w", repo.RegistryStr(), err)
	}
	rt := opts.roundTripper()
	if opts.UserAgent != "" {
		rt = gcrtransport.NewUserAgent(rt, opts.UserAgent)
	}
	rt, err = gcrtransport.NewWithContext(ctx, repo.Registry, auth, rt, []string{repo.Scope(gcrtransport.PullScope)})
	if err != nil {
		return nil, fmt.Errorf("authenticate to registry %s for repository %s: %w", repo.RegistryStr(), repo.RepositoryStr(), classify(err))
	}
	return &registryClient{repo: repo, client: &http.Client{Transport: rt}}, nil
}

// getBlob issues a GET for blob d, with the Range header rng unless it is
// empty, and returns the response if its status is one of want.
func (c *registryClient) getBlob(ctx context.Context, d v1.Hash, rng string, want ...int) (*http.Response, error) {
	u := url.URL{
		Scheme: c.repo.Registry.Scheme(),
		Host:   c.repo.RegistryStr(),
		Path:   "/v2/" + c.repo.RepositoryStr() + "/blobs/" + d.String(),
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.String(), nil)
	if err != nil {
		return nil, err
	}
	if rng != "" {
		req.Header.Set("Range", rng)
	}
	resp, err := c.client.Do(req)
	if err != nil {
		return nil, c.errorf(d, err)
	}
	if err := gcrtransport.CheckError(resp, want...); err != nil {
		resp.Body.Close()
		if resp.StatusCode == http.StatusRequestedRangeNotSatisfiable {
			err = fmt.Errorf("range %s not satisfiable, probably past the end of the blob: %w", rng, err)
		}
		return nil, c.errorf(d, classify(err))
	}
	return resp, nil
}

// errorf names the registry, repository and blob in err.
func (c *registryClient) errorf(d v1.Hash, err error) error {
	return fmt.Errorf("registry %s repository %s blob %s: %w", c.repo.RegistryStr(), c.repo.RepositoryStr(), d, err)
}

// blob fetches all of blob d, verifying its digest as it is read. The size
// is -1 if the registry did not send a Content-Length.
func (c *registryClient) blob(ctx context.Context, d v1.Hash) (io.ReadCloser, int64, error) {
	resp, err := c.getBlob(ctx, d, "", http.StatusOK)
	if err != nil {
		return nil, 0, err
	}
	vr, err := newVerifyingReader(resp.Body, d)
	if err != nil {
		resp.Body.Close()
		return nil, 0, err
	}
	return vr, resp.ContentLength, nil
}

// blobRange fetches bytes [off, off+length) of blob d with one Range
// request. A registry that ignores Range and answers 200 with the whole
// blob is handled by skipping to off.
func (c *registryClient) blobRange(ctx context.Context, d v1.Hash, off, length int64) (io.ReadCloser, error) {
	rng := fmt.Sprintf("bytes=%d-%d", off, off+length-1)
	resp, err := c.getBlob(ctx, d, rng, http.StatusPartialContent, http.StatusOK)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode == http.StatusOK {
		if _, err := io.CopyN(io.Discard, resp.Body, off); err != nil {
			resp.Body.Close()
			return nil, c.errorf(d, fmt.Errorf("skip to offset %d of full response: %w", off, err))
		}
		return newExactReader(resp.Body, length), nil
	}
	start, end, err := parseContentRange(resp.Header.Get("Content-Range"))
	if err == nil && (start != off || end < start) {
		err = fmt.Errorf("asked for %s, got Content-Range %q", rng, resp.Header.Get("Content-Range"))
	}
	if err == nil && end-start+1 < length {
		err = fmt.Errorf("range %s extends past the end of the blob (Content-Range %q)", rng, resp.Header.Get("Content-Range"))
	}
	if err != nil {
		resp.Body.Close()
		return nil, c.errorf(d, err)
	}
	return newExactReader(resp.Body, length), nil
}

// parseContentRange parses "bytes START-END/TOTAL" (TOTAL may be "*").
func parseContentRange(s string) (start, end int64, err error) {
	spec, ok := strings.CutPrefix(s, "bytes ")
	if ok {
		spec, _, ok = strings.Cut(spec, "/")
	}
	var first, last string
	if ok {
		first, last, ok = strings.Cut(spec, "-")
	}
	if ok {
		if start, err = strconv.ParseInt(first, 10, 64); err == nil {
			end, err = strconv.ParseInt(last, 10, 64)
		}
	}
	if !ok || err != nil || start < 0 {
		return 0, 0, fmt.Errorf("malformed Content-Range %q", s)
	}
	return start, end, nil
}
