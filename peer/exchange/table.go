package exchange

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"

	"damselfly/rafs"
	"damselfly/rafs/piece"
)

// TableProtocolID is the piece table exchange (peer/PROTOCOL.md): a peer
// asks another for the piece table of a plain blob.
const TableProtocolID protocol.ID = "/damselfly/piecetable/1.0.0"

// Limits of the piece table exchange.
const (
	tableRequestSize  = 4 + 32 // magic, blob digest
	tableHeadSize     = 1 + 4  // status, length
	tableRequestMagic = "DFPT"
	// MaxTableStreams caps the table requests a TableServer answers at
	// once; more are answered busy.
	MaxTableStreams = 16
	tableTimeout    = 10 * time.Second
)

// Table record statuses.
const (
	tableOK       = 0
	tableNotFound = 1
	tableBusy     = 2
)

// ErrNoTable is returned by FetchTable when the peer holds no table for
// the blob.
var ErrNoTable = errors.New("exchange: peer holds no piece table for the blob")

// TableLookup returns the encoded table of blob, or false; it must only
// return tables whose blob this node verified in full. It is safe for
// concurrent use and does not block on the network.
type TableLookup func(blob rafs.Digest) ([]byte, bool)

// TableServer answers piece table requests from a TableLookup.
type TableServer struct {
	h      host.Host
	lookup TableLookup
	log    *slog.Logger
	sem    chan struct{}
	wg     sync.WaitGroup

	mu     sync.Mutex
	closed bool
}

// NewTableServer registers a TableServer for TableProtocolID on h. log
// may be nil. Close unregisters it.
func NewTableServer(h host.Host, lookup TableLookup, log *slog.Logger) *TableServer {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	s := &TableServer{h: h, lookup: lookup, log: log, sem: make(chan struct{}, MaxTableStreams)}
	h.SetStreamHandler(TableProtocolID, s.handle)
	return s
}

// Close unregisters the server and waits for the answers in progress
// (each bounded by a deadline). It is idempotent.
func (s *TableServer) Close() {
	s.h.RemoveStreamHandler(TableProtocolID)
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	s.wg.Wait()
}

func (s *TableServer) handle(st network.Stream) {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		st.Reset()
		return
	}
	s.wg.Add(1)
	s.mu.Unlock()
	defer s.wg.Done()
	_ = st.SetDeadline(time.Now().Add(tableTimeout))
	select {
	case s.sem <- struct{}{}:
		defer func() { <-s.sem }()
	default:
		_, _ = st.Write(appendTableHead(nil, tableBusy, 0))
		st.Close()
		return
	}
	var req [tableRequestSize]byte
	if _, err := io.ReadFull(st, req[:]); err != nil || string(req[:4]) != tableRequestMagic {
		s.log.Debug("piece table: bad request", "peer", st.Conn().RemotePeer(), "err", err)
		st.Reset()
		return
	}
	_ = st.CloseRead()
	blob := rafs.Digest(req[4:])
	b, ok := s.lookup(blob)
	if !ok || len(b) > piece.MaxEncodedSize {
		_, _ = st.Write(appendTableHead(nil, tableNotFound, 0))
		st.Close()
		return
	}
	if _, err := st.Write(append(appendTableHead(nil, tableOK, len(b)), b...)); err != nil {
		st.Reset()
		return
	}
	st.Close()
}

func appendTableHead(b []byte, status byte, n int) []byte {
	b = append(b, status)
	return binary.LittleEndian.AppendUint32(b, uint32(n))
}

// FetchTable asks peer p for the piece table of blob. The table it
// returns decoded and names blob; it is what p says, not yet checked
// against the blob's bytes (the caller checks the whole blob). Errors:
// ErrNoTable (p holds none), ErrBusy, ErrProtocol (p broke the protocol
// or sent a table that does not decode or names another blob), or the
// stream's. It gives up when ctx is done or after 10 s.
func FetchTable(ctx context.Context, h host.Host, p peer.ID, blob rafs.Digest) (*piece.Table, error) {
	ctx, cancel := context.WithTimeout(ctx, tableTimeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, TableProtocolID)
	if err != nil {
		return nil, fmt.Errorf("piece table from %s: open stream: %w", p, err)
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	dl, _ := ctx.Deadline()
	_ = s.SetDeadline(dl)
	t, err := readTable(s, blob, func() error {
		req := append([]byte(tableRequestMagic), blob[:]...)
		if _, err := s.Write(req); err != nil {
			return err
		}
		return s.CloseWrite()
	})
	if err != nil {
		s.Reset()
		if cerr := ctx.Err(); cerr != nil && !errors.Is(err, ErrProtocol) {
			err = fmt.Errorf("%w (%v)", cerr, err)
		}
		return nil, fmt.Errorf("piece table of %s from %s: %w", blob, p, err)
	}
	s.Close()
	return t, nil
}

// readTable sends the request with send and reads the answer from r.
func readTable(r io.Reader, blob rafs.Digest, send func() error) (*piece.Table, error) {
	werr := send()
	var head [tableHeadSize]byte
	if _, err := io.ReadFull(r, head[:]); err != nil {
		if werr != nil {
			return nil, fmt.Errorf("send request: %w", werr)
		}
		return nil, fmt.Errorf("read answer: %w", err)
	}
	n := binary.LittleEndian.Uint32(head[1:])
	switch head[0] {
	case tableNotFound, tableBusy:
		if n != 0 {
			return nil, fmt.Errorf("%w: status %d with %d bytes", ErrProtocol, head[0], n)
		}
		if head[0] == tableBusy {
			return nil, ErrBusy
		}
		return nil, ErrNoTable
	case tableOK:
	default:
		return nil, fmt.Errorf("%w: status %d", ErrProtocol, head[0])
	}
	if n > piece.MaxEncodedSize {
		return nil, fmt.Errorf("%w: table of %d bytes", ErrProtocol, n)
	}
	b, err := readGrowing(r, int(n), firstChunkAlloc)
	if err != nil {
		return nil, fmt.Errorf("read table: %w", err)
	}
	t, err := piece.Decode(b)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrProtocol, err)
	}
	if t.Blob != blob {
		return nil, fmt.Errorf("%w: table of %s, asked for %s", ErrProtocol, t.Blob, blob)
	}
	return t, nil
}
