package transport

import (
	"errors"
	"fmt"
	"net/http"

	"damselfly/rafs/registry"

	gcrtransport "github.com/google/go-containerregistry/pkg/v1/remote/transport"
)

// Sentinel errors that callers may branch on with [errors.Is]. Operations
// that are not possible for a transport (a ranged read from a docker-archive,
// an index written to one) wrap [errors.ErrUnsupported].
var (
	// ErrBadReference reports a string that is not a valid image reference.
	ErrBadReference = errors.New("invalid image reference")
	// ErrNotFound reports a tag, manifest or blob that does not exist.
	ErrNotFound = errors.New("not found")
	// ErrNoPlatform reports an image index without an image for the
	// requested platform.
	ErrNoPlatform = errors.New("no image for platform")
	// ErrDigestMismatch reports blob content that does not hash to the
	// digest it was fetched by.
	ErrDigestMismatch = errors.New("digest mismatch")
)

// opError prefixes err with the operation and the reference it applied to.
func opError(op string, r Ref, err error) error {
	return fmt.Errorf("%s %s: %w", op, r, err)
}

// unknownTransport reports a Ref whose Transport is not one of ours.
func unknownTransport(r Ref) error {
	return fmt.Errorf("%w: unknown transport %q", ErrBadReference, r.Transport)
}

// classify adds [ErrNotFound] to the chain of a registry error with status
// 404, from go-containerregistry (whole images) or rafs/registry (blobs),
// so callers need not know either's error types.
func classify(err error) error {
	if errors.Is(err, ErrNotFound) {
		return err
	}
	var terr *gcrtransport.Error
	var serr *registry.StatusError
	if errors.As(err, &terr) && terr.StatusCode == http.StatusNotFound ||
		errors.As(err, &serr) && serr.Code == http.StatusNotFound {
		return fmt.Errorf("%w: %w", ErrNotFound, err)
	}
	return err
}
