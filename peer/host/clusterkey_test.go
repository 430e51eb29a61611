package host

import (
	"bytes"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"testing"
)

func TestGenerateClusterKey(t *testing.T) {
	t.Parallel()
	var a, b bytes.Buffer
	if err := GenerateClusterKey(&a); err != nil {
		t.Fatal(err)
	}
	if err := GenerateClusterKey(&b); err != nil {
		t.Fatal(err)
	}
	re := regexp.MustCompile(`^/key/swarm/psk/1\.0\.0/\n/base16/\n[0-9a-f]{64}\n$`)
	if !re.Match(a.Bytes()) {
		t.Fatalf("got %q, want the swarm key format", a.String())
	}
	if bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Fatal("two generated keys are equal")
	}
}

func TestCreateClusterKeyFile(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	p := filepath.Join(dir, "sub", "cluster.key")
	if err := CreateClusterKeyFile(p); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(p)
	if err != nil {
		t.Fatal(err)
	}
	if perm := fi.Mode().Perm(); perm != 0o600 {
		t.Errorf("mode %04o, want 0600", perm)
	}
	before, _ := os.ReadFile(p)
	if err := CreateClusterKeyFile(p); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second create: got %v, want fs.ErrExist", err)
	}
	after, _ := os.ReadFile(p)
	if !bytes.Equal(before, after) {
		t.Fatal("second create changed the key")
	}
	if _, err := loadClusterKey(p); err != nil {
		t.Fatalf("load: %v", err)
	}
	left, _ := filepath.Glob(filepath.Join(dir, "sub", ".tmp-*"))
	if len(left) != 0 {
		t.Fatalf("temp files left: %v", left)
	}
}

func TestLoadClusterKeyEncodings(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	tests := []struct {
		name, text string
		ok         bool
	}{
		{"base16", "/key/swarm/psk/1.0.0/\n/base16/\n" + string(bytes.Repeat([]byte("ab"), 32)) + "\n", true},
		{"base64", "/key/swarm/psk/1.0.0/\n/base64/\n" + "q6urq6urq6urq6urq6urq6urq6urq6urq6urq6urq6s=\n", true},
		{"crlf", "/key/swarm/psk/1.0.0/\r\n/base16/\r\n" + string(bytes.Repeat([]byte("cd"), 32)) + "\r\n", true},
		{"short", "/key/swarm/psk/1.0.0/\n/base16/\nabcd\n", false},
		{"bad header", "/key/swarm/psk/2.0.0/\n/base16/\n" + string(bytes.Repeat([]byte("ab"), 32)) + "\n", false},
		{"bad encoding", "/key/swarm/psk/1.0.0/\n/base58/\nxyz\n", false},
		{"empty", "", false},
		{"too large", string(bytes.Repeat([]byte("x"), maxSecretFile+1)), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			p := filepath.Join(dir, tt.name)
			if err := os.WriteFile(p, []byte(tt.text), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := loadClusterKey(p)
			if (err == nil) != tt.ok {
				t.Fatalf("got %v, want ok=%v", err, tt.ok)
			}
		})
	}
}

func TestReadSecretFileRefusesNonRegular(t *testing.T) {
	t.Parallel()
	if _, err := readSecretFile(t.TempDir()); err == nil {
		t.Fatal("read a directory as a key file")
	}
}
