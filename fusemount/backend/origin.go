package backend

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"sync/atomic"

	"github.com/google/go-containerregistry/pkg/name"

	"damselfly/rafs"
	"damselfly/rafs/registry"
)

// regClient is the origin registry of one repository, read through the
// project's registry client (rafs/registry): its go-containerregistry
// handshake (ping, then a bearer token for pull scope, or Basic) happens
// on the first read, so a Backend starts while the registry is down; the
// token is renewed on a 401 with a challenge, and any 401 that reaches a
// read makes the next one start from a fresh handshake (and, from a
// keychain, fresh credentials). Safe for concurrent use.
type regClient struct {
	client *registry.Client
	scheme string // "http" or "https"
	repo   name.Repository
	// staticAuth is "Basic <Config.Auth>", or "" to use the keychain the
	// client was built with.
	staticAuth string
	last       atomic.Pointer[string] // the Authorization last sent to the registry
}

// origin is "scheme://host", the X-Damselfly-Registry value.
func (r *regClient) origin() string { return r.scheme + "://" + r.repo.RegistryStr() }

func (r *regClient) blobPath(d rafs.Digest) string {
	return "/v2/" + r.repo.RepositoryStr() + "/blobs/" + d.String()
}

// ref is where the registry client reads from, as whom.
func (r *regClient) ref() registry.Ref {
	return registry.Ref{Registry: r.origin(), Repo: r.repo.RepositoryStr(), Authorization: r.staticAuth}
}

// authorization is what a mirror needs to fetch from the registry on our
// behalf: the Authorization header last sent to the registry (a bearer
// token or Basic credentials); before any was, Basic with Config.Auth if
// set, else "". Credentials from the keychain are not sent until the
// registry has been talked to: resolving them may run a credential
// helper, which has no place on the proxy's fast path.
func (r *regClient) authorization() string {
	if p := r.last.Load(); p != nil {
		return *p
	}
	return r.staticAuth
}

// noteAuth keeps what the registry client last sent for our reads.
func (r *regClient) noteAuth() {
	if a := r.client.Authorization(r.ref()); a != "" {
		r.last.Store(&a)
	}
}

// read fills p with bytes [off, off+len(p)) of blob d: one attempt, the
// retry loop is the Backend's. ctx bounds the handshake too, if one is
// due.
func (r *regClient) read(ctx context.Context, d rafs.Digest, off int64, p []byte) error {
	err := r.client.ReadRangeOnce(ctx, r.ref(), d, off, p)
	r.noteAuth()
	return r.classify(err)
}

// touch sends one HEAD of blob d, which settles the credentials (and
// records them for the proxy).
func (r *regClient) touch(ctx context.Context, d rafs.Digest) error {
	_, _, err := r.client.Check(ctx, r.ref(), "blobs", d.String())
	r.noteAuth()
	return err
}

// classify turns the registry client's errors into the Backend's: an
// error status into a statusError (which unwraps to ErrNotFound,
// ErrUnauthorized, ...), a range past the blob into ErrRange, a refused
// certificate over https, and whatever else the registry client deems
// permanent (the origin policy, a malformed challenge, a token realm it
// will not follow), into errPermanent. Network failures and timeouts stay
// as they are: transient.
func (r *regClient) classify(err error) error {
	if err == nil {
		return nil
	}
	var se *registry.StatusError
	if errors.As(err, &se) {
		return &statusError{Code: se.Code, Msg: se.Msg, RetryAfter: se.RetryAfter, cause: err}
	}
	if errors.Is(err, registry.ErrRange) {
		return fmt.Errorf("%w: %w", ErrRange, err)
	}
	var (
		unknownCA x509.UnknownAuthorityError
		badHost   x509.HostnameError
		invalid   x509.CertificateInvalidError
	)
	if r.scheme == "https" && (errors.As(err, &unknownCA) || errors.As(err, &badHost) || errors.As(err, &invalid)) {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	if !registry.IsTransient(err) && !errors.Is(err, context.Canceled) && !errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("%w: %w", errPermanent, err)
	}
	return err
}
