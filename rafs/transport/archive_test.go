package transport

import (
	"bytes"
	"errors"
	"io"
	"path/filepath"
	"testing"
)

func TestArchiveRoundTrip(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	dir := t.TempDir()
	tests := []struct {
		name    string
		write   string
		read    string
		wantErr bool
	}{
		{"default name", "docker-archive:" + filepath.Join(dir, "a.tar"), "docker-archive:" + filepath.Join(dir, "a.tar"), false},
		{"default name by tag", "docker-archive:" + filepath.Join(dir, "b.tar"), "docker-archive:" + filepath.Join(dir, "b.tar") + ":" + DefaultArchiveTag, false},
		{"named", "docker-archive:" + filepath.Join(dir, "c.tar") + ":foo/bar:v1", "docker-archive:" + filepath.Join(dir, "c.tar") + ":foo/bar:v1", false},
		{"wrong name", "docker-archive:" + filepath.Join(dir, "d.tar") + ":foo/bar:v1", "docker-archive:" + filepath.Join(dir, "d.tar") + ":foo/bar:v2", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			if err := WriteImage(t.Context(), mustParse(t, tt.write), img, Options{}); err != nil {
				t.Fatal(err)
			}
			got, err := ReadImage(t.Context(), mustParse(t, tt.read), Options{})
			if tt.wantErr {
				if err == nil {
					t.Error("got no error")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			gotCfg, err := got.ConfigName()
			if err != nil {
				t.Fatal(err)
			}
			wantCfg, err := img.ConfigName()
			if err != nil {
				t.Fatal(err)
			}
			if gotCfg != wantCfg {
				t.Errorf("got config %s, want %s", gotCfg, wantCfg)
			}
		})
	}
}

func TestArchiveBlobsAndLimits(t *testing.T) {
	t.Parallel()
	img := randomImage(t)
	r := mustParse(t, "docker-archive:"+filepath.Join(t.TempDir(), "x.tar"))
	if err := WriteImage(t.Context(), r, img, Options{}); err != nil {
		t.Fatal(err)
	}

	d, want := firstLayer(t, img)
	rc, n, err := Blob(t.Context(), r, d, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(rc)
	rc.Close()
	if err != nil || n != int64(len(want)) || !bytes.Equal(got, want) {
		t.Errorf("layer: got %d bytes (size %d, err %v), want the %d-byte layer", len(got), n, err, len(want))
	}

	cfgName, err := img.ConfigName()
	if err != nil {
		t.Fatal(err)
	}
	wantCfg, err := img.RawConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	rc, _, err = Blob(t.Context(), r, cfgName, Options{})
	if err != nil {
		t.Fatal(err)
	}
	got, _ = io.ReadAll(rc)
	rc.Close()
	if !bytes.Equal(got, wantCfg) {
		t.Errorf("config: got %q, want %q", got, wantCfg)
	}

	if _, err := BlobRange(t.Context(), r, d, 0, 1, Options{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("BlobRange: got %v, want errors.ErrUnsupported", err)
	}
	idx, _ := platformIndex(t, linuxAMD64)
	if err := WriteIndex(t.Context(), r, idx, Options{}); !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("WriteIndex: got %v, want errors.ErrUnsupported", err)
	}
	missing := mustParse(t, "docker-archive:"+filepath.Join(t.TempDir(), "missing.tar"))
	if _, err := ReadImage(t.Context(), missing, Options{}); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing archive: got %v, want ErrNotFound", err)
	}
	if _, isIndex, err := ReadIndex(t.Context(), r, Options{}); err != nil || isIndex {
		t.Errorf("ReadIndex: got isIndex %v, err %v; want false, nil", isIndex, err)
	}
}
