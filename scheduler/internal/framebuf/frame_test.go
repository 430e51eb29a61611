package framebuf

import (
	"bytes"
	"errors"
	"testing"
)

var errBad = errors.New("bad frame")

func TestFrameRoundTrip(t *testing.T) {
	t.Parallel()
	b, err := Finish(append(Start(7), "body"...), 16)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadFrame(bytes.NewReader(b), 16, errBad)
	if err != nil || string(got) != "\x07body" {
		t.Fatalf("got %q, %v; want the type byte and the body", got, err)
	}
	if _, err := Finish(append(Start(7), "a longer body"...), 8); err == nil {
		t.Error("Finish took a frame over its limit")
	}
	for name, in := range map[string][]byte{
		"zero length":  {0, 0, 0, 0},
		"over limit":   {0, 0, 0, 17, 1},
		"huge":         {0xff, 0xff, 0xff, 0xff},
		"cut length":   {0, 0},
		"cut body":     {0, 0, 0, 5, 1, 2},
		"empty stream": nil,
	} {
		_, err := ReadFrame(bytes.NewReader(in), 16, errBad)
		if err == nil {
			t.Errorf("%s: read a frame", name)
		}
		if wantBad := name == "zero length" || name == "over limit" || name == "huge"; wantBad != errors.Is(err, errBad) {
			t.Errorf("%s: got %v; the protocol's sentinel %v", name, err, wantBad)
		}
	}
}
