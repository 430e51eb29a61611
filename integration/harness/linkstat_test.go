package harness

import "testing"

func TestParseLink(t *testing.T) {
	t.Parallel()
	out := `[{"ifindex":2,"ifname":"eth0","stats64":{"rx":{"bytes":1234,"packets":9},"tx":{"bytes":56789,"packets":40}}}]`
	got, err := ParseLink([]byte(out))
	if err != nil {
		t.Fatal(err)
	}
	if want := (LinkBytes{Rx: 1234, Tx: 56789}); got != want {
		t.Errorf("got %+v, want %+v", got, want)
	}
	for _, bad := range []string{`[]`, `[{"ifname":"eth0"}]`, `not json`, `[{"stats64":{"rx":{"bytes":1}}}]`} {
		if _, err := ParseLink([]byte(bad)); err == nil {
			t.Errorf("ParseLink(%s): want an error", bad)
		}
	}
}
