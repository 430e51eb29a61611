package shaper

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/time/rate"
)

// queueSegments bounds the data of one connection and direction that is
// on the wire (past the bucket, not yet delivered): enough for the
// bandwidth-delay product of any link worth emulating (256 segments of
// 16 KiB hold 4 MiB: 1 Gbit/s for 32 ms).
const queueSegments = 256

// link is one direction: a token bucket shared by every connection, and
// the propagation delay.
type link struct {
	lim     *rate.Limiter // nil: unlimited
	oneWay  time.Duration
	segment int
	bytes   atomic.Int64
	bufs    sync.Pool
}

func newLink(cfg Config) *link {
	l := &link{oneWay: cfg.RTT / 2, segment: cfg.Segment}
	l.bufs.New = func() any { b := make([]byte, l.segment); return &b }
	if cfg.Bandwidth > 0 {
		bytesPerSec := float64(cfg.Bandwidth) / 8
		// A burst of 2 ms of traffic (at least two segments) absorbs the
		// timer's oversleeping without letting a sender run ahead of the
		// rate by more than a NIC queue would.
		burst := max(2*cfg.Segment, int(bytesPerSec*0.002))
		l.lim = rate.NewLimiter(rate.Limit(bytesPerSec), burst)
	}
	return l
}

// segment is a piece of data on the wire.
type segment struct {
	buf *[]byte
	n   int
	due time.Time // when it arrives at the far end
}

// forward copies src to dst through the link until src ends (then it
// half-closes dst) or either side fails (then it closes both). Data that
// passes the bucket is delivered oneWay later, and not before
// notBefore+oneWay.
func (l *link) forward(pr *pair, src, dst *net.TCPConn, notBefore time.Time) {
	wire := make(chan segment, queueSegments)
	delivered := make(chan struct{})
	go func() {
		defer close(delivered)
		ok := true
		for s := range wire {
			if ok {
				if d := time.Until(s.due); d > 0 {
					time.Sleep(d)
				}
				if _, err := dst.Write((*s.buf)[:s.n]); err != nil {
					ok = false
					pr.close() // the reader below stops on its next Read
				} else {
					l.bytes.Add(int64(s.n))
				}
			}
			l.bufs.Put(s.buf)
		}
		if ok {
			dst.CloseWrite()
		}
	}()
	earliest := notBefore.Add(l.oneWay)
	var err error
	for {
		bp := l.bufs.Get().(*[]byte)
		var n int
		n, err = src.Read(*bp)
		if n == 0 {
			l.bufs.Put(bp)
		} else {
			if l.lim != nil {
				// n <= segment <= burst, so WaitN cannot refuse it; it
				// sleeps at most n/rate, so no cancellation is needed.
				l.lim.WaitN(context.Background(), n)
			}
			due := time.Now().Add(l.oneWay)
			if due.Before(earliest) {
				due = earliest
			}
			wire <- segment{buf: bp, n: n, due: due}
		}
		if err != nil {
			break
		}
	}
	close(wire)
	<-delivered
	if !errors.Is(err, io.EOF) {
		pr.close()
	}
}
