package host

import (
	"bytes"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"io"

	"github.com/libp2p/go-libp2p/core/pnet"
)

// The cluster key file is libp2p's "swarm key" format (the one IPFS private
// networks use), three lines of text:
//
//	/key/swarm/psk/1.0.0/
//	/base16/
//	<64 lower-case hex digits: the 32-byte key>
//
// pnet.DecodeV1PSK also accepts /base64/ and /bin/ encodings of the key,
// so keys made by other tools for the same purpose work too.
const clusterKeyHeader = "/key/swarm/psk/1.0.0/\n/base16/\n"

// GenerateClusterKey writes a new random cluster key to w in the cluster
// key file format. Store it with mode 0600 (or 0400) on every node.
func GenerateClusterKey(w io.Writer) error {
	var k [32]byte
	if _, err := rand.Read(k[:]); err != nil {
		return fmt.Errorf("generate cluster key: %w", err)
	}
	if _, err := io.WriteString(w, clusterKeyHeader+hex.EncodeToString(k[:])+"\n"); err != nil {
		return fmt.Errorf("write cluster key: %w", err)
	}
	return nil
}

// CreateClusterKeyFile writes a new cluster key to path with mode 0600. It
// fails if path exists, so a key in use is never overwritten.
func CreateClusterKeyFile(path string) error {
	var b bytes.Buffer
	if err := GenerateClusterKey(&b); err != nil {
		return err
	}
	return createSecretFile(path, b.Bytes())
}

// loadClusterKey reads and checks the cluster key file at path.
func loadClusterKey(path string) (pnet.PSK, error) {
	b, err := readSecretFile(path)
	if err != nil {
		return nil, err
	}
	psk, err := pnet.DecodeV1PSK(bytes.NewReader(b))
	if err != nil {
		return nil, fmt.Errorf("%s: not a cluster key file: %w", path, err)
	}
	if bytes.Equal(psk, make([]byte, len(psk))) {
		return nil, fmt.Errorf("%s: the cluster key is all zeros", path)
	}
	return psk, nil
}
