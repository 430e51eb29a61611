package manifestshare

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"strings"
	"time"

	"damselfly/rafs/manifests"
	"damselfly/rafs/registry"
)

// The protocol (peer/PROTOCOL.md, "Manifests"): one request and one
// answer per stream.
//
//	request: version (1) | kind (1: manifest, 2: tag, 3: public) |
//	         str registry | str repo | str object (a digest, or a tag)
//	answer:  status |
//	         if ok and kind is public: at (int64, Unix ns), then nothing |
//	         if ok and kind is tag: str digest | at (int64, Unix ns) |
//	         if ok: has manifest (0 or 1; always 1 for kind manifest) |
//	         if it has: str media type | body length (uint32) | body
//
// str is a uint16 length (big-endian) and that many bytes. Every length
// is bounded below and checked before anything is allocated.

const version = 1

// Kinds of request.
const (
	kindManifest = 1
	kindTag      = 2
	// kindPublic asks when the peer last saw the registry let anonymous
	// clients pull from the repository (object only routes the question).
	kindPublic = 3
)

// Status of an answer.
type Status uint8

// Statuses.
const (
	StatusOK      Status = 0
	StatusNotHeld Status = 1 // the peer holds no such manifest or resolution
	StatusBusy    Status = 2 // the peer serves as many streams as it takes
	StatusBad     Status = 3 // the request broke the protocol
)

func (s Status) String() string {
	switch s {
	case StatusOK:
		return "ok"
	case StatusNotHeld:
		return "not held"
	case StatusBusy:
		return "busy"
	case StatusBad:
		return "bad request"
	}
	return fmt.Sprintf("status %d", uint8(s))
}

// Bounds on the fields.
const (
	maxRegistry  = 255
	maxRepo      = 1024
	maxObject    = 256
	maxMediaType = 256
)

// request is one question.
type request struct {
	kind     uint8
	registry string
	repo     string
	object   string
}

// answer is one reply. tag is set for an ok answer to a tag request,
// manifest when the peer sent one.
type answer struct {
	status   Status
	tag      manifests.Tag
	manifest *manifests.Manifest
}

var errMalformed = errors.New("malformed manifest-share message")

func appendStr(b []byte, s string) []byte {
	b = binary.BigEndian.AppendUint16(b, uint16(len(s)))
	return append(b, s...)
}

func readStr(r *bufio.Reader, limit int) (string, error) {
	var n [2]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return "", err
	}
	l := int(binary.BigEndian.Uint16(n[:]))
	if l > limit {
		return "", fmt.Errorf("%w: a field of %d bytes (limit %d)", errMalformed, l, limit)
	}
	b := make([]byte, l)
	if _, err := io.ReadFull(r, b); err != nil {
		return "", err
	}
	return string(b), nil
}

func (q request) validate() error {
	switch {
	case q.kind != kindManifest && q.kind != kindTag && q.kind != kindPublic:
		return fmt.Errorf("%w: kind %d", errMalformed, q.kind)
	case q.registry == "" || len(q.registry) > maxRegistry:
		return fmt.Errorf("%w: registry of %d bytes", errMalformed, len(q.registry))
	case q.repo == "" || len(q.repo) > maxRepo:
		return fmt.Errorf("%w: repository of %d bytes", errMalformed, len(q.repo))
	case q.object == "" || len(q.object) > maxObject:
		return fmt.Errorf("%w: object of %d bytes", errMalformed, len(q.object))
	case q.kind == kindManifest && (!registry.ValidDigest(q.object) || !strings.HasPrefix(q.object, "sha256:")):
		return fmt.Errorf("%w: %q is not a digest", errMalformed, q.object)
	case q.kind == kindTag && registry.ValidDigest(q.object):
		return fmt.Errorf("%w: a tag request for digest %q", errMalformed, q.object)
	}
	return nil
}

func (q request) encode() ([]byte, error) {
	if err := q.validate(); err != nil {
		return nil, err
	}
	b := []byte{version, q.kind}
	b = appendStr(b, q.registry)
	b = appendStr(b, q.repo)
	return appendStr(b, q.object), nil
}

func readRequest(r *bufio.Reader) (request, error) {
	var q request
	var hdr [2]byte
	if _, err := io.ReadFull(r, hdr[:]); err != nil {
		return q, err
	}
	if hdr[0] != version {
		return q, fmt.Errorf("%w: version %d", errMalformed, hdr[0])
	}
	q.kind = hdr[1]
	var err error
	if q.registry, err = readStr(r, maxRegistry); err != nil {
		return q, err
	}
	if q.repo, err = readStr(r, maxRepo); err != nil {
		return q, err
	}
	if q.object, err = readStr(r, maxObject); err != nil {
		return q, err
	}
	return q, q.validate()
}

func (a answer) encode(kind uint8) ([]byte, error) {
	b := []byte{byte(a.status)}
	if a.status != StatusOK {
		return b, nil
	}
	if kind == kindPublic {
		return binary.BigEndian.AppendUint64(b, uint64(a.tag.At.UnixNano())), nil
	}
	if kind == kindTag {
		if !registry.ValidDigest(a.tag.Digest) {
			return nil, fmt.Errorf("tag resolution to %q", a.tag.Digest)
		}
		b = appendStr(b, a.tag.Digest)
		b = binary.BigEndian.AppendUint64(b, uint64(a.tag.At.UnixNano()))
	}
	m := a.manifest
	if m == nil {
		if kind == kindManifest {
			return nil, errors.New("a manifest answer without its manifest")
		}
		return append(b, 0), nil
	}
	if len(m.Body) > manifests.MaxSize || len(m.MediaType) > maxMediaType {
		return nil, fmt.Errorf("manifest %s over the protocol's limits", m.Digest)
	}
	b = append(b, 1)
	b = appendStr(b, m.MediaType)
	b = binary.BigEndian.AppendUint32(b, uint32(len(m.Body)))
	return append(b, m.Body...), nil
}

// readAnswer reads the answer to q. A manifest that arrives is checked
// against the digest it must have (q's, or the tag's resolution); a
// resolution dated after now+maxSkew is refused.
func readAnswer(r *bufio.Reader, q request, now time.Time) (answer, error) {
	var a answer
	st, err := r.ReadByte()
	if err != nil {
		return a, err
	}
	a.status = Status(st)
	switch a.status {
	case StatusOK:
	case StatusNotHeld, StatusBusy, StatusBad:
		return a, nil
	default:
		return a, fmt.Errorf("%w: status %d", errMalformed, st)
	}
	if q.kind == kindPublic {
		t, err := readTime(r, now)
		if err != nil {
			return a, err
		}
		a.tag = manifests.Tag{Registry: q.registry, Repo: q.repo, At: t}
		return a, nil
	}
	want := q.object
	if q.kind == kindTag {
		d, err := readStr(r, maxObject)
		if err != nil {
			return a, err
		}
		if !registry.ValidDigest(d) {
			return a, fmt.Errorf("%w: tag resolved to %q", errMalformed, d)
		}
		t, err := readTime(r, now)
		if err != nil {
			return a, err
		}
		a.tag = manifests.Tag{Registry: q.registry, Repo: q.repo, Tag: q.object, Digest: d, At: t}
		want = d
	}
	has, err := r.ReadByte()
	if err != nil {
		return a, err
	}
	switch {
	case has == 0 && q.kind == kindTag:
		return a, nil
	case has != 1:
		return a, fmt.Errorf("%w: manifest flag %d", errMalformed, has)
	}
	mt, err := readStr(r, maxMediaType)
	if err != nil {
		return a, err
	}
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return a, err
	}
	size := int(binary.BigEndian.Uint32(n[:]))
	if size > manifests.MaxSize {
		return a, fmt.Errorf("%w: a manifest of %d bytes (limit %d)", errMalformed, size, manifests.MaxSize)
	}
	body := make([]byte, size)
	if _, err := io.ReadFull(r, body); err != nil {
		return a, err
	}
	if got := manifests.Digest(body); got != want {
		return a, fmt.Errorf("manifest from a peer has digest %s, not %s", got, want)
	}
	a.manifest = &manifests.Manifest{MediaType: mt, Digest: want, Body: body}
	return a, nil
}

// readTime reads a time (int64 Unix ns), refusing one after now+maxSkew
// or before 1970.
func readTime(r *bufio.Reader, now time.Time) (time.Time, error) {
	var at [8]byte
	if _, err := io.ReadFull(r, at[:]); err != nil {
		return time.Time{}, err
	}
	t := time.Unix(0, int64(binary.BigEndian.Uint64(at[:]))).UTC()
	if t.After(now.Add(maxSkew)) || t.Before(time.Unix(0, 0)) {
		return time.Time{}, fmt.Errorf("%w: a time of %v, now is %v", errMalformed, t, now)
	}
	return t, nil
}
