package cluster

import (
	"testing"

	"damselfly/integration/harness"
	"damselfly/rafs/rafstest"
)

// registry is the cluster's origin, a harness.Registry whose failures
// fail the test; it is stopped (and its log shown if the test failed) in
// t.Cleanup.
type registry struct {
	*harness.Registry
	t    testing.TB
	host string // "127.0.0.1:PORT"
}

func startRegistry(t testing.TB) *registry {
	t.Helper()
	return startRegistryLogged(t, false)
}

// startRegistryLogged is startRegistry, keeping the registry's access log
// (in Proc().Log() of each start) if accessLog is set.
func startRegistryLogged(t testing.TB, accessLog bool) *registry {
	t.Helper()
	rafstest.RequireTool(t, "docker-registry")
	r, err := harness.StartRegistry(t.Context(), harness.RegistryConfig{Dir: t.TempDir(), AccessLog: accessLog})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stopOrFail(t, r.Proc())
		showLog(t, r.Proc())
	})
	return &registry{Registry: r, t: t, host: r.Host()}
}

// down stops the registry: connections to its port are refused.
func (r *registry) down() {
	r.t.Helper()
	if err := r.Down(); err != nil {
		r.t.Error(err)
	}
}

// up starts it again on the same port with the same content.
func (r *registry) up() {
	r.t.Helper()
	if err := r.Up(r.t.Context()); err != nil {
		r.t.Fatal(err)
	}
}

// requireAuth restarts the registry with htpasswd authentication: from
// then on only user with pass may pull (or push) anything.
func (r *registry) requireAuth(user, pass string) {
	r.t.Helper()
	if err := r.RequireAuth(r.t.Context(), user, pass); err != nil {
		r.t.Fatal(err)
	}
}
