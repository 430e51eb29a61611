package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
)

// demoOrigin is the registry the demo's nodes pull from: an in-process
// go-containerregistry registry, or a real one given by URL behind a
// forwarding gate. Either way it counts the chunk bytes it serves, and Stop
// closes it, which is how the demo plays a registry outage.
type demoOrigin struct {
	srv  *http.Server
	ln   net.Listener
	host string // "127.0.0.1:port": what image references name
	// rangeBytes counts the blob bytes served to ranged GETs: chunk
	// fetches (a pull or a bootstrap fetch asks for whole blobs).
	rangeBytes atomic.Int64
	stopped    atomic.Bool
	done       chan struct{}
}

// startOrigin serves an in-process registry on a loopback port, or, when
// upstream is a URL, a gate forwarding to it.
func startOrigin(upstream string) (*demoOrigin, error) {
	var h http.Handler
	if upstream == "" {
		h = registry.New(registry.Logger(log.New(io.Discard, "", 0)))
	} else {
		u, err := url.Parse(upstream)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			return nil, fmt.Errorf("--registry %q: want http(s)://host[:port]", upstream)
		}
		rp := httputil.NewSingleHostReverseProxy(u)
		rp.ErrorLog = log.New(io.Discard, "", 0)
		director := rp.Director
		rp.Director = func(r *http.Request) { director(r); r.Host = u.Host }
		h = rp
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := &demoOrigin{ln: ln, host: ln.Addr().String(), done: make(chan struct{})}
	o.srv = &http.Server{Handler: o.count(h), ReadHeaderTimeout: 10 * time.Second, ErrorLog: log.New(io.Discard, "", 0)}
	go func() {
		defer close(o.done)
		o.srv.Serve(ln)
	}()
	return o, nil
}

// count wraps h, adding the bytes of every ranged blob GET it answers.
func (o *demoOrigin) count(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.Contains(r.URL.Path, "/blobs/") {
			if r.Header.Get("Range") != "" {
				w = &countingWriter{ResponseWriter: w, n: &o.rangeBytes}
			}
		}
		h.ServeHTTP(w, r)
	})
}

// Stop closes the registry and every connection to it.
func (o *demoOrigin) Stop() error {
	if !o.stopped.CompareAndSwap(false, true) {
		return nil
	}
	err := o.srv.Close()
	<-o.done
	if errors.Is(err, http.ErrServerClosed) {
		err = nil
	}
	return err
}

// Shutdown stops the registry gracefully, bounded by ctx.
func (o *demoOrigin) Shutdown(ctx context.Context) error {
	if !o.stopped.CompareAndSwap(false, true) {
		return nil
	}
	err := o.srv.Shutdown(ctx)
	<-o.done
	return err
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
