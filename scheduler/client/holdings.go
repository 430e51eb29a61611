package client

import (
	"slices"

	lpeer "github.com/libp2p/go-libp2p/core/peer"

	"damselfly/rafs"
	"damselfly/rafs/route"
	"damselfly/scheduler"
	"damselfly/scheduler/wire"
)

// holding is what this peer holds of one blob and what its owner has yet
// to hear about it.
type holding struct {
	held scheduler.Bitset
	// sentTo is the scheduler that has this blob's holdings as of the
	// last delivery, "" for none. When the owner differs, the next
	// delivery is an AnnounceFull.
	sentTo string
	// add and drop are the changes since, disjoint.
	add, drop scheduler.Bitset
}

// op is a queued Abandon or Report, for the owner of blob.
type op struct {
	blob  rafs.Digest
	msg   wire.Message
	tries int
}

// maxTries bounds the sends of an Abandon or Report that found no answer:
// it is worth little once its lease or turn has run out.
const maxTries = 3

func clearBit(b scheduler.Bitset, i uint32) {
	if w := int(i / 64); w < len(b) {
		b[w] &^= 1 << (i % 64)
	}
}

func (c *Client) holding(blob rafs.Digest) *holding {
	h := c.blobs[blob]
	if h == nil {
		h = &holding{}
		c.blobs[blob] = h
	}
	return h
}

// Announce records that this peer holds chunks of blob and queues the
// news for the blob's scheduler. It does not block on the network.
func (c *Client) Announce(blob rafs.Digest, chunks []uint32) {
	if len(chunks) == 0 {
		return
	}
	c.mu.Lock()
	h := c.holding(blob)
	for _, o := range chunks {
		h.held = h.held.Set(o)
		h.add = h.add.Set(o)
		clearBit(h.drop, o)
	}
	c.dirty[blob] = struct{}{}
	c.mu.Unlock()
	c.signal()
}

// Drop records that this peer no longer holds chunks of blob and queues
// the news. It does not block on the network.
func (c *Client) Drop(blob rafs.Digest, chunks []uint32) {
	if len(chunks) == 0 {
		return
	}
	c.mu.Lock()
	h := c.blobs[blob]
	if h == nil {
		c.mu.Unlock()
		return
	}
	for _, o := range chunks {
		clearBit(h.held, o)
		clearBit(h.add, o)
		h.drop = h.drop.Set(o)
	}
	c.dirty[blob] = struct{}{}
	c.mu.Unlock()
	c.signal()
}

// Abandon queues giving up this peer's origin turns for chunks of blob.
func (c *Client) Abandon(blob rafs.Digest, chunks []uint32) {
	if len(chunks) == 0 {
		return
	}
	c.enqueue(op{blob: blob, msg: &wire.Abandon{Blob: blob, Chunks: normalize(chunks)}})
}

// Report queues this peer's outcome of an assignment to parent.
func (c *Client) Report(parent lpeer.ID, o route.Outcome) {
	c.enqueue(op{blob: o.Blob, msg: &wire.Report{About: parent.String(), Outcome: scheduler.Outcome{
		Blob: o.Blob, Bytes: o.Bytes, Duration: o.Duration, OK: o.OK,
		BadBytes: o.BadBytes, BadChunk: o.BadChunk, Missing: normalize(o.Missing),
	}}})
}

func (c *Client) enqueue(o op) {
	c.mu.Lock()
	if len(c.ops) >= c.cfg.QueueSize {
		c.ops = c.ops[1:] // the oldest is the least useful
		c.log.Debug("scheduler queue full; dropped the oldest message")
	}
	c.ops = append(c.ops, o)
	c.mu.Unlock()
	c.signal()
}

// normalize returns a sorted copy of ordinals without duplicates, capped
// at what one message may carry.
func normalize(ordinals []uint32) []uint32 {
	if len(ordinals) == 0 {
		return nil
	}
	o := slices.Clone(ordinals)
	slices.Sort(o)
	o = slices.Compact(o)
	return o[:min(len(o), wire.MaxOrdinals)]
}
