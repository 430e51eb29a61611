package transport

import (
	"fmt"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// Transport names, as written before the first ':' of a reference.
const (
	OCI           = "oci"            // an OCI image layout directory
	DockerArchive = "docker-archive" // a `docker save` tarball
	Docker        = "docker"         // a registry speaking the distribution API
)

// Ref is a parsed image reference. Build one with [Parse].
type Ref struct {
	// Transport is [OCI], [DockerArchive] or [Docker].
	Transport string
	// Path is the layout directory (oci) or the tarball (docker-archive);
	// empty for docker.
	Path string
	// Tag is, for oci, the org.opencontainers.image.ref.name annotation
	// selecting a manifest in the layout; for docker-archive, the image
	// reference ("repo:tag") inside the tarball; for docker, the tag, or
	// empty when the reference is by digest. Empty means "not given".
	Tag string
	// Name is the registry reference; set for docker only. Parse marks its
	// registry insecure (plain HTTP) when [Options.Insecure] is set or the
	// host is a loopback address.
	Name name.Reference
}

// String returns the reference in the form [Parse] accepts.
func (r Ref) String() string {
	switch r.Transport {
	case Docker:
		if r.Name == nil {
			return "docker://"
		}
		return "docker://" + r.Name.String()
	default:
		if r.Tag == "" {
			return r.Transport + ":" + r.Path
		}
		return r.Transport + ":" + r.Path + ":" + r.Tag
	}
}

// maxRefLen bounds the input to Parse; no real path or name comes close.
const maxRefLen = 4096

// ociTag is the accepted form of an oci: tag: an OCI ref.name component
// (which cannot contain '/' or ':' here, since those delimit the path),
// loosened to allow '_' as docker tags do.
var ociTag = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9_.+@-]{0,127}$`)

// Parse parses a skopeo-style reference:
//
//	oci:PATH[:TAG]             the last ':' after the last '/' starts TAG
//	docker-archive:PATH[:REF]  the first ':' starts REF, a docker tag reference
//	docker://HOST/REPO:TAG     or docker://HOST/REPO@sha256:HEX
//
// A docker reference without a host or tag gets docker.io and "latest", as
// with skopeo. opts.Insecure, or a loopback host, makes the registry plain
// HTTP. Errors wrap [ErrBadReference].
func Parse(s string, opts Options) (Ref, error) {
	r, err := parse(s, opts)
	if err != nil {
		return Ref{}, fmt.Errorf("parse reference %q: %w: %w", truncate(s), ErrBadReference, err)
	}
	return r, nil
}

func parse(s string, opts Options) (Ref, error) {
	if len(s) > maxRefLen {
		return Ref{}, fmt.Errorf("longer than %d bytes", maxRefLen)
	}
	if strings.ContainsRune(s, 0) {
		return Ref{}, fmt.Errorf("contains a NUL byte")
	}
	transport, rest, ok := strings.Cut(s, ":")
	if !ok {
		return Ref{}, fmt.Errorf("missing transport (want oci:, docker-archive: or docker://)")
	}
	switch transport {
	case OCI:
		return parseOCI(rest)
	case DockerArchive:
		return parseArchive(rest)
	case Docker:
		return parseDocker(rest, opts)
	default:
		return Ref{}, fmt.Errorf("unknown transport %q (want oci, docker-archive or docker)", transport)
	}
}

func parseOCI(rest string) (Ref, error) {
	path, tag := rest, ""
	if colon := strings.LastIndexByte(rest, ':'); colon > strings.LastIndexByte(rest, '/') {
		path, tag = rest[:colon], rest[colon+1:]
		if !ociTag.MatchString(tag) {
			return Ref{}, fmt.Errorf("invalid tag %q (want %s)", tag, ociTag)
		}
	}
	if path == "" {
		return Ref{}, fmt.Errorf("empty layout path")
	}
	return Ref{Transport: OCI, Path: path, Tag: tag}, nil
}

func parseArchive(rest string) (Ref, error) {
	path, tag, hasTag := strings.Cut(rest, ":")
	if path == "" {
		return Ref{}, fmt.Errorf("empty archive path")
	}
	if hasTag {
		if _, err := name.NewTag(tag); err != nil {
			return Ref{}, fmt.Errorf("image reference %q in archive: %w", tag, err)
		}
	}
	return Ref{Transport: DockerArchive, Path: path, Tag: tag}, nil
}

func parseDocker(rest string, opts Options) (Ref, error) {
	body, ok := strings.CutPrefix(rest, "//")
	if !ok {
		return Ref{}, fmt.Errorf("docker references start with docker://")
	}
	if body == "" {
		return Ref{}, fmt.Errorf("empty image name")
	}
	ref, err := name.ParseReference(body)
	if err != nil {
		return Ref{}, err
	}
	if opts.Insecure || isLoopback(ref.Context().RegistryStr()) {
		if ref, err = name.ParseReference(body, name.Insecure); err != nil {
			return Ref{}, err
		}
	}
	r := Ref{Transport: Docker, Name: ref}
	if t, ok := ref.(name.Tag); ok {
		r.Tag = t.TagStr()
	}
	return r, nil
}

// truncate keeps error messages readable when fed a huge or binary input.
func truncate(s string) string {
	const limit = 256
	if len(s) <= limit {
		return s
	}
	return s[:limit] + "..."
}
