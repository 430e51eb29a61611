package snapshotter

import (
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"testing"
	"time"

	"damselfly/fusemount"
)

// fakeMountEnv makes the test binary act as a mount daemon (fakeMount):
// the lifecycle tests start it through the snapshotter as they would
// `damselfly mount`, a real process in its own session, without FUSE.
const fakeMountEnv = "SNAPSHOTTER_TEST_FAKE_MOUNT"

func TestMain(m *testing.M) {
	if os.Getenv(fakeMountEnv) != "" {
		os.Exit(fakeMount())
	}
	os.Exit(m.Run())
}

// fakeMount serves a mount daemon's status socket (DAMSELFLY_API_SOCKET)
// as "running" for the mountpoint in its last argument until SIGTERM.
// With SNAPSHOTTER_TEST_FAKE_FAIL set it fails as a daemon whose image
// cannot be mounted does.
func fakeMount() int {
	if msg := os.Getenv("SNAPSHOTTER_TEST_FAKE_FAIL"); msg != "" {
		fmt.Fprintln(os.Stderr, "damselfly:", msg)
		return 1
	}
	mp := os.Args[len(os.Args)-1]
	sock := os.Getenv("DAMSELFLY_API_SOCKET")
	os.Remove(sock)
	ln, err := net.Listen("unix", sock)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	st := fusemount.Status{State: "running", Image: os.Args[len(os.Args)-2], Mountpoint: mp, PID: os.Getpid(), Started: time.Now()}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /api/v1/daemon", func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(st) })
	go http.Serve(ln, mux)
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	<-sig
	ln.Close()
	return 0
}
