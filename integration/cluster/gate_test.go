package cluster

import (
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// gate is one node's road to the registry: a reverse proxy on its own
// loopback port that counts the blob bytes the registry sends that node.
// Every reference a node uses names its gate, so "bytes from the
// registry" is measured per node, outside the code under test.
type gate struct {
	host      string // "127.0.0.1:PORT"
	blobBytes atomic.Int64
	blobGets  atomic.Int64
}

func startGate(t testing.TB, registryHost string) *gate {
	t.Helper()
	u := &url.URL{Scheme: "http", Host: registryHost}
	rp := httputil.NewSingleHostReverseProxy(u)
	rp.ErrorLog = log.New(io.Discard, "", 0)
	// docker-registry writes absolute Location headers for its own host;
	// requests keep the gate's Host so that what it returns names the gate.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{host: ln.Addr().String()}
	srv := &http.Server{ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0),
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/sha256:") {
				g.blobGets.Add(1)
				w = &countingWriter{ResponseWriter: w, n: &g.blobBytes}
			}
			rp.ServeHTTP(w, r)
		})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return g
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(n))
	return n, err
}

func (c *countingWriter) Flush() {
	if f, ok := c.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}
