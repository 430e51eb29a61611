package fetch

import (
	"testing"

	"damselfly/rafs/registry"
)

// TestSourceKey: the flight map's source key (a SHA-256 hash: the
// credentials are not kept in clear) differs with each of registry,
// repository and credentials, and fields cannot run into each other.
func TestSourceKey(t *testing.T) {
	t.Parallel()
	base := registry.Ref{Registry: "https://r.example", Repo: "a/b", Authorization: "Bearer secret"}
	k := sourceOf(base)
	for _, other := range []registry.Ref{
		{Registry: "https://s.example", Repo: "a/b", Authorization: "Bearer secret"},
		{Registry: "https://r.example", Repo: "a/c", Authorization: "Bearer secret"},
		{Registry: "https://r.example", Repo: "a/b", Authorization: "Bearer other"},
		{Registry: "https://r.example", Repo: "a/bBearer secret"},
	} {
		if sourceOf(other) == k {
			t.Errorf("%+v has the key of %+v", other, base)
		}
	}
	if sourceOf(base) != k {
		t.Error("the key is not deterministic")
	}
}
