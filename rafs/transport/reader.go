package transport

import (
	"crypto/sha256"
	"crypto/sha512"
	"encoding/hex"
	"fmt"
	"hash"
	"io"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// checkDigest accepts sha256 and sha512 digests in lower-case hex. Beyond
// rejecting nonsense early, this keeps a digest used as a file name from
// escaping the blobs directory.
func checkDigest(d v1.Hash) error {
	var want int
	switch d.Algorithm {
	case "sha256":
		want = 2 * sha256.Size
	case "sha512":
		want = 2 * sha512.Size
	default:
		return fmt.Errorf("unsupported digest algorithm %q", d.Algorithm)
	}
	if len(d.Hex) != want {
		return fmt.Errorf("digest %s: want %d hex digits, got %d", d, want, len(d.Hex))
	}
	for _, c := range d.Hex {
		if (c < '0' || c > '9') && (c < 'a' || c > 'f') {
			return fmt.Errorf("digest %s: not lower-case hex", d)
		}
	}
	return nil
}

// verifyingReader hashes what it reads and, at EOF, fails with
// ErrDigestMismatch if the content does not match the digest.
type verifyingReader struct {
	rc   io.ReadCloser
	h    hash.Hash
	want v1.Hash
}

// newVerifyingReader wraps rc, which must yield the blob with digest d.
func newVerifyingReader(rc io.ReadCloser, d v1.Hash) (*verifyingReader, error) {
	var h hash.Hash
	switch d.Algorithm {
	case "sha256":
		h = sha256.New()
	case "sha512":
		h = sha512.New()
	default:
		return nil, fmt.Errorf("unsupported digest algorithm %q", d.Algorithm)
	}
	return &verifyingReader{rc: rc, h: h, want: d}, nil
}

func (v *verifyingReader) Read(p []byte) (int, error) {
	n, err := v.rc.Read(p)
	v.h.Write(p[:n])
	if err == io.EOF {
		if got := hex.EncodeToString(v.h.Sum(nil)); got != v.want.Hex {
			return n, fmt.Errorf("%w: content hashes to %s:%s", ErrDigestMismatch, v.want.Algorithm, got)
		}
	}
	return n, err
}

func (v *verifyingReader) Close() error { return v.rc.Close() }
