package transport

import (
	"errors"
	"strings"
	"testing"
)

const testDigest = "sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParse(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name      string
		in        string
		opts      Options
		transport string
		path      string
		tag       string
		image     string // docker: the fully qualified name
		scheme    string // docker: the registry scheme
		wantErr   string // substring of the error; empty means success
	}{
		{name: "oci absolute", in: "oci:/tmp/x", transport: OCI, path: "/tmp/x"},
		{name: "oci with tag", in: "oci:/tmp/x:v1", transport: OCI, path: "/tmp/x", tag: "v1"},
		{name: "oci relative with tag", in: "oci:rel/dir:tag", transport: OCI, path: "rel/dir", tag: "tag"},
		{name: "oci relative", in: "oci:x", transport: OCI, path: "x"},
		{name: "oci colon in directory", in: "oci:/tmp/a:b/c", transport: OCI, path: "/tmp/a:b/c"},
		{name: "oci last colon wins", in: "oci:/tmp/a:b:c", transport: OCI, path: "/tmp/a:b", tag: "c"},
		{name: "oci tag punctuation", in: "oci:/x:1.0_rc-1+b", transport: OCI, path: "/x", tag: "1.0_rc-1+b"},
		{name: "oci empty path", in: "oci:", wantErr: "empty layout path"},
		{name: "oci empty path with tag", in: "oci::v1", wantErr: "empty layout path"},
		{name: "oci empty tag", in: "oci:/tmp/x:", wantErr: "invalid tag"},
		{name: "oci bad tag", in: "oci:/tmp/x:a b", wantErr: "invalid tag"},
		{name: "oci tag too long", in: "oci:/x:" + strings.Repeat("a", 129), wantErr: "invalid tag"},
		{
			name: "docker loopback", in: "docker://127.0.0.1:5000/a/b:t",
			transport: Docker, tag: "t", image: "127.0.0.1:5000/a/b:t", scheme: "http",
		},
		{
			name: "docker loopback /8", in: "docker://127.1.2.3:5000/a:t",
			transport: Docker, tag: "t", image: "127.1.2.3:5000/a:t", scheme: "http",
		},
		{
			name: "docker localhost digest", in: "docker://localhost:5000/a@" + testDigest,
			transport: Docker, image: "localhost:5000/a@" + testDigest, scheme: "http",
		},
		{
			name: "docker ipv6 loopback", in: "docker://[::1]:5000/a:t",
			transport: Docker, tag: "t", image: "[::1]:5000/a:t", scheme: "http",
		},
		{
			name: "docker remote", in: "docker://example.com/a/b:t",
			transport: Docker, tag: "t", image: "example.com/a/b:t", scheme: "https",
		},
		{
			name: "docker remote insecure", in: "docker://example.com/a/b:t", opts: Options{Insecure: true},
			transport: Docker, tag: "t", image: "example.com/a/b:t", scheme: "http",
		},
		{
			name: "docker defaults", in: "docker://alpine",
			transport: Docker, tag: "latest", image: "index.docker.io/library/alpine:latest", scheme: "https",
		},
		{name: "docker without slashes", in: "docker:alpine", wantErr: "docker://"},
		{name: "docker empty", in: "docker://", wantErr: "empty image name"},
		{name: "docker upper-case repo", in: "docker://example.com/A:t", wantErr: "invalid image reference"},
		{name: "docker bad digest", in: "docker://example.com/a@sha256:xyz", wantErr: "invalid image reference"},
		{name: "archive", in: "docker-archive:/x.tar", transport: DockerArchive, path: "/x.tar"},
		{
			name: "archive with reference", in: "docker-archive:/x.tar:foo/bar:v1",
			transport: DockerArchive, path: "/x.tar", tag: "foo/bar:v1",
		},
		{name: "archive empty path", in: "docker-archive:", wantErr: "empty archive path"},
		{name: "archive digest reference", in: "docker-archive:/x.tar:foo@" + testDigest, wantErr: "image reference"},
		{name: "missing transport", in: "/tmp/x", wantErr: "missing transport"},
		{name: "empty", in: "", wantErr: "missing transport"},
		{name: "unknown transport", in: "dir:/tmp/x", wantErr: "unknown transport"},
		{name: "NUL byte", in: "oci:/tmp/x\x00", wantErr: "NUL"},
		{name: "too long", in: "oci:/" + strings.Repeat("a", maxRefLen), wantErr: "longer than"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			r, err := Parse(tt.in, tt.opts)
			if tt.wantErr != "" {
				if err == nil {
					t.Fatalf("Parse(%q) = %+v, want error containing %q", tt.in, r, tt.wantErr)
				}
				if !errors.Is(err, ErrBadReference) {
					t.Errorf("got error %v, want one wrapping ErrBadReference", err)
				}
				if !strings.Contains(err.Error(), tt.wantErr) {
					t.Errorf("got error %q, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse(%q): %v", tt.in, err)
			}
			if r.Transport != tt.transport || r.Path != tt.path || r.Tag != tt.tag {
				t.Errorf("got transport %q path %q tag %q, want %q %q %q",
					r.Transport, r.Path, r.Tag, tt.transport, tt.path, tt.tag)
			}
			if tt.transport != Docker {
				if r.Name != nil {
					t.Errorf("got Name %v for %s, want nil", r.Name, tt.transport)
				}
				return
			}
			if got := r.Name.Name(); got != tt.image {
				t.Errorf("got name %q, want %q", got, tt.image)
			}
			if got := r.Name.Context().Scheme(); got != tt.scheme {
				t.Errorf("got scheme %q, want %q", got, tt.scheme)
			}
		})
	}
}

func TestRefStringRoundTrip(t *testing.T) {
	t.Parallel()
	for _, in := range []string{
		"oci:/tmp/x",
		"oci:/tmp/x:v1",
		"oci:/tmp/a:b/c",
		"docker-archive:/x.tar",
		"docker-archive:/x.tar:foo/bar:v1",
		"docker://127.0.0.1:5000/a/b:t",
		"docker://localhost:5000/a@" + testDigest,
	} {
		r, err := Parse(in, Options{})
		if err != nil {
			t.Fatalf("Parse(%q): %v", in, err)
		}
		if got := r.String(); got != in {
			t.Errorf("Parse(%q).String() = %q, want the input back", in, got)
		}
	}
}

func TestIsLoopback(t *testing.T) {
	t.Parallel()
	tests := []struct {
		host string
		want bool
	}{
		{"localhost", true},
		{"LOCALHOST:5000", true},
		{"127.0.0.1", true},
		{"127.0.0.1:5000", true},
		{"127.255.0.9:1", true},
		{"[::1]:5000", true},
		{"::1", true},
		{"128.0.0.1:5000", false},
		{"10.0.0.1:5000", false},
		{"localhost.example.com", false},
		{"example.com:5000", false},
		{"", false},
	}
	for _, tt := range tests {
		if got := isLoopback(tt.host); got != tt.want {
			t.Errorf("isLoopback(%q) = %v, want %v", tt.host, got, tt.want)
		}
	}
}

func TestRegistryNameHonoursLaterInsecure(t *testing.T) {
	t.Parallel()
	r, err := Parse("docker://example.com/a:t", Options{})
	if err != nil {
		t.Fatal(err)
	}
	ref, err := registryName(r, Options{Insecure: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := ref.Context().Scheme(); got != "http" {
		t.Errorf("got scheme %q, want http", got)
	}
	if _, err := registryName(Ref{Transport: Docker}, Options{}); !errors.Is(err, ErrBadReference) {
		t.Errorf("got %v for a docker Ref without Name, want ErrBadReference", err)
	}
}

func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"oci:/tmp/x", "oci:/tmp/x:v1", "oci:rel/dir:tag", "oci:/tmp/a:b/c", "oci:", "oci::",
		"docker://127.0.0.1:5000/a/b:t", "docker://localhost:5000/a@" + testDigest,
		"docker://[::1]:5000/a:t", "docker://alpine", "docker://", "docker:x",
		"docker-archive:/x.tar", "docker-archive:/x.tar:foo/bar:v1", "/tmp/x", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		r, err := Parse(s, Options{})
		if err != nil {
			if !errors.Is(err, ErrBadReference) {
				t.Fatalf("Parse(%q) error %v does not wrap ErrBadReference", s, err)
			}
			return
		}
		if r.Transport != Docker && r.Path == "" {
			t.Fatalf("Parse(%q) gave an empty path", s)
		}
		again, err := Parse(r.String(), Options{})
		if err != nil {
			t.Fatalf("Parse(%q) ok, but its String %q does not parse: %v", s, r.String(), err)
		}
		if again.String() != r.String() {
			t.Fatalf("String not stable: %q then %q", r.String(), again.String())
		}
	})
}
