package bench

import (
	"reflect"
	"testing"
)

func TestParseSimulation(t *testing.T) {
	out := []byte(`Reading package lists...
Building dependency tree...
The following NEW packages will be installed:
  libc6 python3-numpy tzdata
Inst tzdata (2025b-0+deb12u1 Debian:12.15/oldstable [all])
Inst libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64]) []
Inst python3-numpy (1:1.24.2-1+deb12u1 Debian:12.15/oldstable, Debian-Security:12/oldstable-security [amd64])
Conf libc6 (2.36-9+deb12u14 Debian:12.15/oldstable [amd64])
`)
	got, err := parseSimulation(out)
	if err != nil {
		t.Fatal(err)
	}
	want := []debPackage{
		{"libc6", "2.36-9+deb12u14", "amd64"},
		{"python3-numpy", "1:1.24.2-1+deb12u1", "amd64"},
		{"tzdata", "2025b-0+deb12u1", "all"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v, want %+v", got, want)
	}
	if f := want[1].file(); f != "python3-numpy_1%3a1.24.2-1+deb12u1_amd64.deb" {
		t.Errorf("got file %q, want the epoch escaped as apt-get download names it", f)
	}
	if _, err := parseSimulation([]byte("Inst broken\n")); err == nil {
		t.Error("got no error for a malformed Inst line")
	}
}
