package transport

import (
	"errors"
	"net/http"
	"strings"
	"testing"
)

func TestRegistryRoundTrip(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	img := randomImage(t)
	// No Options.Insecure: plain HTTP is implied by the 127.0.0.1 host.
	r := mustParse(t, "docker://"+host+"/test/img:t")
	if got := r.Name.Context().Scheme(); got != "http" {
		t.Fatalf("got scheme %q for %s, want http", got, host)
	}
	if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
		t.Fatal(err)
	}
	for _, ref := range []string{
		"docker://" + host + "/test/img:t",
		"docker://" + host + "/test/img@" + digest(t, img).String(),
	} {
		got, err := ReadImage(t.Context(), mustParse(t, ref), Options{UserAgent: "damselfly-test"})
		if err != nil {
			t.Fatalf("ReadImage(%s): %v", ref, err)
		}
		if g, w := digest(t, got), digest(t, img); g != w {
			t.Errorf("%s: got digest %s, want %s", ref, g, w)
		}
	}
	if _, isIndex, err := ReadIndex(t.Context(), r, Options{}); err != nil || isIndex {
		t.Errorf("ReadIndex of an image: got isIndex %v, err %v; want false, nil", isIndex, err)
	}
}

func TestRegistryIndex(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, nil)
	idx, imgs := platformIndex(t, linuxAMD64, linuxARM64)
	r := mustParse(t, "docker://"+host+"/multi/arch:latest")
	if err := WriteIndex(t.Context(), r, idx, Options{}); err != nil {
		t.Fatal(err)
	}
	got, isIndex, err := ReadIndex(t.Context(), r, Options{})
	if err != nil || !isIndex {
		t.Fatalf("ReadIndex: got isIndex %v, err %v; want true, nil", isIndex, err)
	}
	if g, w := digest(t, got), digest(t, idx); g != w {
		t.Errorf("got index %s, want %s", g, w)
	}
	checkPlatforms(t, r, imgs)
}

func TestRegistryErrors(t *testing.T) {
	t.Parallel()
	host := newRegistry(t, func(h http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
			if strings.HasPrefix(req.URL.Path, "/v2/private/") {
				w.WriteHeader(http.StatusUnauthorized)
				return
			}
			h.ServeHTTP(w, req)
		})
	})
	tests := []struct {
		name     string
		ref      string
		notFound bool
		contains string
	}{
		{"missing tag", "docker://" + host + "/test/img:nope", true, "read image docker://" + host + "/test/img:nope"},
		{"unauthorized", "docker://" + host + "/private/img:t", false, "401"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := ReadImage(t.Context(), mustParse(t, tt.ref), Options{})
			if err == nil {
				t.Fatal("got no error")
			}
			if got := errors.Is(err, ErrNotFound); got != tt.notFound {
				t.Errorf("errors.Is(%v, ErrNotFound) = %v, want %v", err, got, tt.notFound)
			}
			if !strings.Contains(err.Error(), tt.contains) {
				t.Errorf("got error %q, want it to contain %q", err, tt.contains)
			}
		})
	}
}
