package transport

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

func TestCheckDigest(t *testing.T) {
	t.Parallel()
	tests := []struct {
		d  v1.Hash
		ok bool
	}{
		{v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 64)}, true},
		{v1.Hash{Algorithm: "sha512", Hex: strings.Repeat("0", 128)}, true},
		{v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("a", 63)}, false},
		{v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("A", 64)}, false},
		{v1.Hash{Algorithm: "sha256", Hex: "../" + strings.Repeat("a", 61)}, false},
		{v1.Hash{Algorithm: "md5", Hex: strings.Repeat("a", 32)}, false},
		{v1.Hash{}, false},
	}
	for _, tt := range tests {
		if err := checkDigest(tt.d); (err == nil) != tt.ok {
			t.Errorf("checkDigest(%s) = %v, want ok %v", tt.d, err, tt.ok)
		}
	}
}

func TestVerifyingReader(t *testing.T) {
	t.Parallel()
	content := []byte("hello, blob")
	sum := sha256.Sum256(content)
	good := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	bad := v1.Hash{Algorithm: "sha256", Hex: strings.Repeat("0", 64)}
	tests := []struct {
		name string
		d    v1.Hash
		want error
	}{
		{"match", good, nil},
		{"mismatch", bad, ErrDigestMismatch},
	}
	for _, tt := range tests {
		vr, err := newVerifyingReader(io.NopCloser(bytes.NewReader(content)), tt.d)
		if err != nil {
			t.Fatal(err)
		}
		got, err := io.ReadAll(vr)
		if !errors.Is(err, tt.want) && err != tt.want {
			t.Errorf("%s: got error %v, want %v", tt.name, err, tt.want)
		}
		if !bytes.Equal(got, content) {
			t.Errorf("%s: got %q, want %q", tt.name, got, content)
		}
	}
}
