package transport

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/google/go-containerregistry/pkg/authn"
	v1 "github.com/google/go-containerregistry/pkg/v1"
)

// ignoreRange makes a registry answer ranged GETs with the whole blob.
func ignoreRange(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		req.Header.Del("Range")
		h.ServeHTTP(w, req)
	})
}

// blobSources writes img to each kind of source that supports ranged reads
// and returns their references.
func blobSources(t *testing.T, img v1.Image) map[string]Ref {
	t.Helper()
	srcs := map[string]Ref{
		"oci":                 mustParse(t, "oci:"+t.TempDir()+":v1"),
		"docker":              mustParse(t, "docker://"+newRegistry(t, nil)+"/test/img:t"),
		"docker ignore Range": mustParse(t, "docker://"+newRegistry(t, ignoreRange)+"/test/img:t"),
	}
	for name, r := range srcs {
		if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
	}
	return srcs
}

func TestBlobRange(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	d, want := firstLayer(t, img)
	size := int64(len(want))
	ranges := []struct {
		name        string
		off, length int64
		wantErr     string // substring of the error from BlobRange or Read
	}{
		{name: "first byte", off: 0, length: 1},
		{name: "whole", off: 0, length: size},
		{name: "middle", off: 100, length: 200},
		{name: "last byte", off: size - 1, length: 1},
		{name: "empty", off: 7, length: 0},
		{name: "past end", off: size - 10, length: 20, wantErr: "past the end"},
		{name: "negative offset", off: -1, length: 1, wantErr: "invalid range"},
		{name: "overflow", off: 1, length: 1<<63 - 1, wantErr: "invalid range"},
	}
	for name, r := range blobSources(t, img) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			br, err := NewBlobReader(t.Context(), r, Options{})
			if err != nil {
				t.Fatal(err)
			}
			for _, rg := range ranges {
				rc, err := br.BlobRange(t.Context(), d, rg.off, rg.length)
				var got []byte
				if err == nil {
					got, err = io.ReadAll(rc)
					rc.Close()
				}
				if rg.wantErr != "" {
					// A registry that ignores Range can only notice mid-stream.
					if err == nil || !(strings.Contains(err.Error(), rg.wantErr) || errors.Is(err, io.ErrUnexpectedEOF)) {
						t.Errorf("%s: got error %v, want %q", rg.name, err, rg.wantErr)
					}
					continue
				}
				if err != nil {
					t.Errorf("%s: %v", rg.name, err)
					continue
				}
				if w := want[rg.off : rg.off+rg.length]; !bytes.Equal(got, w) {
					t.Errorf("%s: got %d bytes, want %d bytes [%d, %d) of the blob", rg.name, len(got), len(w), rg.off, rg.off+rg.length)
				}
			}
			// ReadRange fills a buffer with what BlobRange streams.
			for _, rg := range ranges {
				if rg.off < 0 || rg.length > size {
					continue // no buffer for these
				}
				p := make([]byte, rg.length)
				err := br.ReadRange(t.Context(), d, rg.off, p)
				if rg.wantErr != "" {
					if err == nil || !(strings.Contains(err.Error(), rg.wantErr) || errors.Is(err, io.ErrUnexpectedEOF)) {
						t.Errorf("ReadRange %s: got error %v, want %q", rg.name, err, rg.wantErr)
					}
					continue
				}
				if err != nil {
					t.Errorf("ReadRange %s: %v", rg.name, err)
				} else if !bytes.Equal(p, want[rg.off:rg.off+rg.length]) {
					t.Errorf("ReadRange %s: bytes differ from [%d, %d) of the blob", rg.name, rg.off, rg.off+rg.length)
				}
			}
		})
	}
}

func TestBlob(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	d, want := firstLayer(t, img)
	for name, r := range blobSources(t, img) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			rc, n, err := Blob(t.Context(), r, d, Options{})
			if err != nil {
				t.Fatal(err)
			}
			defer rc.Close()
			got, err := io.ReadAll(rc)
			if err != nil {
				t.Fatal(err)
			}
			if n != int64(len(want)) || !bytes.Equal(got, want) {
				t.Errorf("got %d bytes (size %d), want the %d-byte layer", len(got), n, len(want))
			}
		})
	}
}

func TestBlobNotFound(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	missing, err := v1.NewHash(testDigest)
	if err != nil {
		t.Fatal(err)
	}
	for name, r := range blobSources(t, img) {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			_, err := BlobRange(t.Context(), r, missing, 0, 1, Options{})
			if !errors.Is(err, ErrNotFound) {
				t.Fatalf("got %v, want ErrNotFound", err)
			}
			wants := []string{testDigest, r.String()}
			if r.Transport == Docker {
				wants = append(wants, "registry "+r.Name.Context().RegistryStr(), "repository test/img")
			}
			for _, s := range wants {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("got error %q, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestBlobRangeOneRequestEach(t *testing.T) {
	t.Parallel()
	var requests atomic.Int64
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			requests.Add(1)
			h.ServeHTTP(w, req)
		})
	})
	img := randomImage(t)
	d, _ := firstLayer(t, img)
	r := mustParse(t, "docker://"+host+"/test/img:t")
	if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
		t.Fatal(err)
	}
	br, err := NewBlobReader(t.Context(), r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	before := requests.Load()
	const reads = 5
	for i := range reads {
		rc, err := br.BlobRange(t.Context(), d, int64(i), 10)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, rc)
		rc.Close()
	}
	if got := requests.Load() - before; got != reads {
		t.Errorf("got %d requests for %d ranged reads, want %d", got, reads, reads)
	}
}

func TestBlobUnauthorized(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/blobs/") {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	d, err := v1.NewHash(testDigest)
	if err != nil {
		t.Fatal(err)
	}
	_, err = BlobRange(t.Context(), mustParse(t, "docker://"+host+"/test/img:t"), d, 0, 1, Options{})
	if err == nil || !strings.Contains(err.Error(), "401") || errors.Is(err, ErrNotFound) {
		t.Errorf("got %v, want a 401 error that is not ErrNotFound", err)
	}
}

func TestBlobBadDigest(t *testing.T) {
	t.Parallel()
	r := mustParse(t, "oci:"+t.TempDir())
	for _, d := range []v1.Hash{
		{Algorithm: "sha256", Hex: "../../../../etc/passwd"},
		{Algorithm: "md5", Hex: "00"},
		{Algorithm: "sha256", Hex: strings.ToUpper(testDigest[len("sha256:"):])},
	} {
		if _, _, err := Blob(t.Context(), r, d, Options{}); err == nil || errors.Is(err, ErrNotFound) {
			t.Errorf("Blob(%s): got %v, want a digest error", d, err)
		}
	}
}

func TestBlobRangeWrongContentRange(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/blobs/") {
				w.Header().Set("Content-Range", "bytes 0-9/100")
				w.WriteHeader(http.StatusPartialContent)
				w.Write(make([]byte, 10))
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	d, err := v1.NewHash(testDigest)
	if err != nil {
		t.Fatal(err)
	}
	_, err = BlobRange(t.Context(), mustParse(t, "docker://"+host+"/test/img:t"), d, 5, 10, Options{})
	if err == nil || !strings.Contains(err.Error(), "got Content-Range") {
		t.Errorf("got %v, want an error about the Content-Range", err)
	}
}

func TestRegistryBlobDigestMismatch(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.Contains(req.URL.Path, "/blobs/") {
				w.Write([]byte("not what you asked for"))
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	d, err := v1.NewHash(testDigest)
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err := Blob(t.Context(), mustParse(t, "docker://"+host+"/test/img:t"), d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	if _, err := io.ReadAll(rc); !errors.Is(err, ErrDigestMismatch) {
		t.Errorf("got %v, want ErrDigestMismatch", err)
	}
}

// Blob reads from a registry follow rafs/registry's policy: transient
// failures are retried, and a whole blob without a Content-Length is
// still read, with size -1.
func TestRegistryBlobPolicy(t *testing.T) {
	t.Parallel()
	var fail atomic.Int32
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if !strings.Contains(req.URL.Path, "/blobs/") || req.Method != http.MethodGet {
				h.ServeHTTP(w, req)
				return
			}
			if fail.Add(-1) >= 0 {
				w.Header().Set("Retry-After", "0")
				http.Error(w, "busy", http.StatusServiceUnavailable)
				return
			}
			h.ServeHTTP(noLength{w}, req)
		})
	})
	img := randomImage(t)
	d, want := firstLayer(t, img)
	r := mustParse(t, "docker://"+host+"/test/img:t")
	if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
		t.Fatal(err)
	}
	br, err := NewBlobReader(t.Context(), r, Options{})
	if err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name     string
		failures int32
		wantErr  string
	}{
		{name: "no failure"},
		{name: "two 503s", failures: 2},
		{name: "503s beyond the retry limit", failures: 10, wantErr: "503"},
	}
	for _, tt := range tests {
		fail.Store(tt.failures)
		rc, n, err := br.Blob(t.Context(), d)
		var got []byte
		if err == nil {
			got, err = io.ReadAll(rc)
			rc.Close()
		}
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: Blob: got %v, want an error with %q", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: Blob: %v", tt.name, err)
		case n != -1 || !bytes.Equal(got, want):
			t.Errorf("%s: Blob: got %d bytes (size %d), want the %d-byte layer (size -1)", tt.name, len(got), n, len(want))
		}

		fail.Store(tt.failures)
		p := make([]byte, 100)
		err = br.ReadRange(t.Context(), d, 10, p)
		switch {
		case tt.wantErr != "":
			if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("%s: ReadRange: got %v, want an error with %q", tt.name, err, tt.wantErr)
			}
		case err != nil:
			t.Errorf("%s: ReadRange: %v", tt.name, err)
		case !bytes.Equal(p, want[10:110]):
			t.Errorf("%s: ReadRange: bytes differ", tt.name)
		}
	}
}

// noLength drops the Content-Length of a 200, so the body is chunked.
type noLength struct{ http.ResponseWriter }

func (w noLength) WriteHeader(code int) {
	if code == http.StatusOK {
		w.Header().Del("Content-Length")
	}
	w.ResponseWriter.WriteHeader(code)
}

// staticKeychain answers every registry with one set of credentials.
type staticKeychain struct{ user, pass string }

func (k staticKeychain) Resolve(authn.Resource) (authn.Authenticator, error) {
	return authn.FromConfig(authn.AuthConfig{Username: k.user, Password: k.pass}), nil
}

// The keychain in Options reaches a registry that wants Basic
// credentials (as docker-registry with htpasswd does without a token
// server), for blobs as for images.
func TestRegistryBlobBasicAuth(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if u, p, ok := req.BasicAuth(); !ok || u != "alice" || p != "s3cret" {
				w.Header().Set("WWW-Authenticate", `Basic realm="test"`)
				http.Error(w, "unauthorized", http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	img := randomImage(t)
	d, want := firstLayer(t, img)
	r := mustParse(t, "docker://"+host+"/test/img:t")
	opts := Options{Keychain: staticKeychain{"alice", "s3cret"}}
	if err := WriteImage(t.Context(), r, img, opts); err != nil {
		t.Fatal(err)
	}
	rc, _, err := Blob(t.Context(), r, d, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, want) {
		t.Errorf("Blob with credentials: got %d bytes, err %v; want the layer", len(got), err)
	}
	rc, err = BlobRange(t.Context(), r, d, 5, 10, opts)
	if err != nil {
		t.Fatal(err)
	}
	got, err = io.ReadAll(rc)
	rc.Close()
	if err != nil || !bytes.Equal(got, want[5:15]) {
		t.Errorf("BlobRange with credentials: got %q, err %v; want bytes 5-14", got, err)
	}
	for name, kc := range map[string]authn.Keychain{
		"wrong password": staticKeychain{"alice", "nope"},
		"anonymous":      authn.NewMultiKeychain(),
	} {
		_, err := BlobRange(t.Context(), r, d, 0, 1, Options{Keychain: kc})
		if err == nil || !strings.Contains(err.Error(), "401") || errors.Is(err, ErrNotFound) {
			t.Errorf("%s: got %v, want a 401 error that is not ErrNotFound", name, err)
		}
	}
}
