package harness

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"damselfly/rafs/rafstest"
)

func TestProcWaitLineAndStop(t *testing.T) {
	t.Parallel()
	p, err := Start(ProcConfig{Name: "sh", LogDir: t.TempDir(), Path: "/bin/sh",
		Args: []string{"-c", `echo oops >&2; echo "ready at here"; exec sleep 60`}})
	if err != nil {
		t.Fatal(err)
	}
	got, err := p.WaitLine("ready at", 10*time.Second)
	if err != nil || got != "here" {
		t.Fatalf("WaitLine: got %q, %v; want %q", got, err, "here")
	}
	if err := p.Stop(); err != nil {
		t.Errorf("Stop: got %v, want nil", err)
	}
	if !p.Exited() {
		t.Errorf("got a running process after Stop")
	}
	if line, err := p.LogLine("oops"); err != nil || line != "oops" {
		t.Errorf("LogLine: got %q, %v; want %q", line, err, "oops")
	}
	if _, err := p.WaitLine("never", time.Second); err == nil {
		t.Errorf("WaitLine on an exited process: got nil error")
	}
}

func TestProcStopKillsWhatIgnoresSIGTERM(t *testing.T) {
	t.Parallel()
	p, err := Start(ProcConfig{Name: "stubborn", LogDir: t.TempDir(), Path: "/bin/sh", StopTimeout: 200 * time.Millisecond,
		Args: []string{"-c", `trap "" TERM; echo up; while :; do sleep 1; done`}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := p.WaitLine("up", 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if err := p.Stop(); !errors.Is(err, ErrKilled) {
		t.Errorf("Stop: got %v, want ErrKilled", err)
	}
}

func TestRegistryDownUp(t *testing.T) {
	t.Parallel()
	rafstest.RequireTool(t, "docker-registry")
	r, err := StartRegistry(t.Context(), RegistryConfig{Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.Stop() })
	get := func() error {
		resp, err := http.Get("http://" + r.Host() + "/v2/")
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	if err := get(); err != nil {
		t.Fatalf("GET /v2/ of a started registry: %v", err)
	}
	if err := r.Down(); err != nil {
		t.Fatal(err)
	}
	if err := get(); err == nil {
		t.Errorf("GET /v2/ of a registry that is down: got an answer")
	}
	if err := r.Up(t.Context()); err != nil {
		t.Fatal(err)
	}
	if err := get(); err != nil {
		t.Errorf("GET /v2/ after Up: %v", err)
	}
}
