package plain

import (
	"sync"
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/piece"
)

// Bounds of the plain blob state.
const (
	maxTables        = 4096 // verified tables kept, oldest dropped first
	maxTableSources  = 3    // holders asked for a table before the origin
	maxPendingTables = 4096 // tables from peers awaiting their blob's check
)

// tableSet is the node's piece tables. Safe for concurrent use.
type tableSet struct {
	store tableStore

	mu      sync.Mutex
	tables  map[rafs.Digest]*keptTable
	order   []rafs.Digest // of tables, oldest first
	pending map[rafs.Digest]tableSource
	turns   map[rafs.Digest]struct{} // origin turns for piece 0
}

// keptTable is a verified table and its encoding, as served.
type keptTable struct {
	t   *piece.Table
	enc []byte
}

// tableSource is where a table not yet verified came from.
type tableSource struct {
	t        *piece.Table
	peer     lpeer.ID
	assigned bool // the Router named the peer for piece 0
	at       time.Time
}

func newTableSet(store tableStore) *tableSet {
	return &tableSet{
		store:   store,
		tables:  make(map[rafs.Digest]*keptTable),
		pending: make(map[rafs.Digest]tableSource),
		turns:   make(map[rafs.Digest]struct{}),
	}
}

func (p *tableSet) get(blob rafs.Digest) *piece.Table {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.tables[blob]; e != nil {
		return e.t
	}
	return nil
}

// lookup is the TableServer's view: verified tables only.
func (p *tableSet) lookup(blob rafs.Digest) ([]byte, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e := p.tables[blob]; e != nil {
		return e.enc, true
	}
	return nil, false
}

// keep adds a verified table, persisting it unless it comes from the
// store.
func (p *tableSet) keep(t *piece.Table) {
	p.add(t, true)
}

func (p *tableSet) add(t *piece.Table, persist bool) {
	p.mu.Lock()
	if _, ok := p.tables[t.Blob]; ok {
		p.mu.Unlock()
		return
	}
	var dropped []rafs.Digest
	for len(p.order) >= maxTables {
		dropped = append(dropped, p.order[0])
		delete(p.tables, p.order[0])
		p.order = p.order[1:]
	}
	e := &keptTable{t: t, enc: t.Encode()}
	p.tables[t.Blob] = e
	p.order = append(p.order, t.Blob)
	p.mu.Unlock()
	for _, b := range dropped {
		p.store.remove(b)
	}
	if persist {
		p.store.write(t.Blob, e.enc)
	}
}

func (p *tableSet) forget(blob rafs.Digest) {
	p.mu.Lock()
	delete(p.tables, blob)
	delete(p.pending, blob)
	for i, b := range p.order {
		if b == blob {
			p.order = append(p.order[:i:i], p.order[i+1:]...)
			break
		}
	}
	p.mu.Unlock()
	p.store.remove(blob)
}

func (p *tableSet) setPending(blob rafs.Digest, src tableSource) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.pending) >= maxPendingTables {
		for b, s := range p.pending { // drop the stale ones, else any
			if time.Since(s.at) > time.Hour || len(p.pending) >= maxPendingTables {
				delete(p.pending, b)
			}
		}
	}
	p.pending[blob] = src
}

func (p *tableSet) takePending(blob rafs.Digest, t *piece.Table) (tableSource, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	src, ok := p.pending[blob]
	if ok && src.t == t {
		delete(p.pending, blob)
		return src, true
	}
	return tableSource{}, false
}

func (p *tableSet) setTurn(blob rafs.Digest) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if len(p.turns) < maxPendingTables {
		p.turns[blob] = struct{}{}
	}
}

func (p *tableSet) takeTurn(blob rafs.Digest) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	_, ok := p.turns[blob]
	delete(p.turns, blob)
	return ok
}
