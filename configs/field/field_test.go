package field

import (
	"errors"
	"fmt"
	"testing"
)

func TestIn(t *testing.T) {
	t.Parallel()
	err := In("proxy", errors.Join(
		errors.New("listen: \"x\" has no port"),
		errors.New("listen_addrs[2]: not TCP"),
		fmt.Errorf("wrapped: %w", errors.New("inner")),
		errors.Join(errors.New("auth_ttl: -1s is not positive")),
		errors.New("Not a key: so the section only"),
	))
	want := "proxy.listen: \"x\" has no port\n" +
		"proxy.listen_addrs[2]: not TCP\n" +
		"proxy.wrapped: inner\n" +
		"proxy.auth_ttl: -1s is not positive\n" +
		"proxy: Not a key: so the section only"
	if err == nil || err.Error() != want {
		t.Errorf("got %q, want %q", err, want)
	}
	if got := len(Problems(err)); got != 5 {
		t.Errorf("got %d problems, want 5", got)
	}
	if In("proxy", nil) != nil {
		t.Error("In(nil) is not nil")
	}
}
