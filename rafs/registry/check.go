package registry

import (
	"context"
	"damselfly/rafs"
	"fmt"
	"net/http"
	"time"
)

// manifestAccept is what a manifest check accepts: every manifest and
// index media type a registry may hold, so that the answer is about
// access, not content negotiation.
const manifestAccept = "application/vnd.oci.image.manifest.v1+json, application/vnd.oci.image.index.v1+json, " +
	"application/vnd.docker.distribution.manifest.v2+json, application/vnd.docker.distribution.manifest.list.v2+json, " +
	"application/vnd.docker.distribution.manifest.v1+prettyjws"

// checkAttempts is how many times Check asks before a transient failure
// is returned: one retry rides out a blip, more would keep a refused
// client waiting through an outage.
const checkAttempts = 2

// Check asks the registry of ref whether ref's credentials may pull an
// object of ref.Repo: kind "blobs" or "manifests", object a digest (or a
// tag, for manifests). It sends one HEAD, authenticating as a client of
// the registry would with those credentials (a bearer challenge is
// answered with a token for them, or an anonymous one when there are
// none; the node's credentials only where they are lent), and returns
// the registry's status code: 200 means the registry would serve it.
// An error means no answer: the registry could not be reached, or
// answered 5xx or 429 (IsTransient), or the request broke the origin
// policy (ErrRefused). Safe for concurrent use.
func (c *Client) Check(ctx context.Context, ref Ref, kind, object string) (int, string, error) {
	if !ValidRepo(ref.Repo) {
		return 0, "", fmt.Errorf("check: bad repository name %q", ref.Repo)
	}
	switch {
	case kind == "blobs" && ValidDigest(object):
	case kind == "manifests" && (ValidDigest(object) || ValidTag(object)):
	default:
		return 0, "", fmt.Errorf("check: bad %s reference %q", kind, object)
	}
	base, err := c.registryOf(ref)
	if err != nil {
		return 0, "", err
	}
	u := base + "/v2/" + ref.Repo + "/" + kind + "/" + object
	var lastErr error
	for attempt := 0; attempt < checkAttempts; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt, retryAfter(lastErr))); err != nil {
				break
			}
		}
		code, challenge, _, err := c.checkOnce(ctx, ref, kind, u)
		if err == nil {
			return code, challenge, nil
		}
		lastErr = err
		if !IsTransient(err) || ctx.Err() != nil {
			break
		}
	}
	return 0, "", fmt.Errorf("check %s: %w", u, lastErr)
}

// maxKeptChallenge bounds a challenge kept from a check.
const maxKeptChallenge = 1 << 10

// BlobSize returns the size of blob in ref.Repo as the registry of ref
// states it (Content-Length of a HEAD, with ref's credentials), for a
// reader that cuts the blob into pieces before any byte of it arrives.
// Only 200 with a length is an answer; transient failures are retried as
// Check retries them.
func (c *Client) BlobSize(ctx context.Context, ref Ref, blob rafs.Digest) (int64, error) {
	if !ValidRepo(ref.Repo) {
		return 0, fmt.Errorf("blob size: bad repository name %q", ref.Repo)
	}
	base, err := c.registryOf(ref)
	if err != nil {
		return 0, err
	}
	u := base + "/v2/" + ref.Repo + "/blobs/" + blob.String()
	var lastErr error
	for attempt := 0; attempt < checkAttempts; attempt++ {
		if attempt > 0 {
			if err := sleep(ctx, backoff(attempt, retryAfter(lastErr))); err != nil {
				break
			}
		}
		code, _, size, err := c.checkOnce(ctx, ref, "blobs", u)
		switch {
		case err == nil && code == http.StatusOK && size >= 0:
			return size, nil
		case err == nil && code == http.StatusOK:
			return 0, fmt.Errorf("blob size %s: the registry sent no length", u)
		case err == nil:
			return 0, fmt.Errorf("blob size %s: %w", u, &StatusError{Code: code, Msg: http.StatusText(code)})
		}
		lastErr = err
		if !IsTransient(err) || ctx.Err() != nil {
			break
		}
	}
	return 0, fmt.Errorf("blob size %s: %w", u, lastErr)
}

func (c *Client) checkOnce(ctx context.Context, ref Ref, kind, u string) (int, string, int64, error) {
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.send(ctx, ref, func() (*http.Request, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		if err != nil {
			return nil, err
		}
		if kind == "manifests" {
			req.Header.Set("Accept", manifestAccept)
		}
		return req, nil
	}, true)
	if err != nil {
		return 0, "", 0, err
	}
	defer drain(resp)
	if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
		return 0, "", 0, &StatusError{Code: resp.StatusCode, Msg: http.StatusText(resp.StatusCode),
			RetryAfter: ParseRetryAfter(resp.Header.Get("Retry-After"), time.Now())}
	}
	challenge := ""
	if ch := resp.Header.Get("WWW-Authenticate"); resp.StatusCode == http.StatusUnauthorized && len(ch) <= maxKeptChallenge {
		challenge = ch
	}
	return resp.StatusCode, challenge, resp.ContentLength, nil
}

// Ping does the registry's API version check (GET /v2/) of ref's
// registry with ref.Authorization as it is (no token is fetched, no node
// credentials are used) and returns the status and headers, so that a
// mirror can pass the registry's challenge on to its client: registry
// clients learn from this answer whether, and how, to send credentials.
// An error means the registry could not be reached.
func (c *Client) Ping(ctx context.Context, ref Ref) (int, http.Header, error) {
	base, err := c.registryOf(ref)
	if err != nil {
		return 0, nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, c.cfg.Timeout)
	defer cancel()
	resp, err := c.do(c.plain, func() (*http.Request, error) {
		return http.NewRequestWithContext(ctx, http.MethodGet, base+"/v2/", nil)
	}, ref.Authorization)
	if err != nil {
		return 0, nil, fmt.Errorf("ping %s: %w", base, err)
	}
	drain(resp)
	return resp.StatusCode, resp.Header, nil
}
