package fusemount

import (
	"context"

	"damselfly/rafs/flight"
)

// The Fetcher's chunk fetches in flight are a flight.Group keyed by
// chunk index, so that concurrent misses of a chunk cause one fetch. A
// fetch is a run, one flight.Batch: one backend request for a chunk a
// reader wants (its head) and the chunks after it that nobody else is
// fetching (Group.Extend); each chunk's flight finishes as soon as that
// chunk is delivered, so the head's reader does not wait for the tail.
// A run works under its batch's context. Until its head has arrived it
// is cancelled when every caller holding one of its flights has given
// up; once the head has arrived the run is detached and goes on in the
// background (filling memory and the node cache) whether anyone waits or
// not, since a reader that wanted the head will likely want the tail.

// chunkFlight is the fetch of one chunk, a part of a run.
type chunkFlight = flight.Flight[uint32, fetched]

// fetched is a chunk's decoded bytes and the source that served them.
// The flight holds a reference to data, dropped when the flight is
// settled and its last caller has left it (release).
type fetched struct {
	data *decoded
	src  string
}

// release drops the flight's reference to its chunk (flight.Group's
// release function).
func (v fetched) release() {
	if v.data != nil {
		v.data.drop()
	}
}

// arrived finishes fl with the chunk's bytes, taking over the caller's
// reference to data. The head of a run detaches it first, so that the
// head's readers, woken, cannot cancel its tail.
func (f *Fetcher) arrived(fl *chunkFlight, head bool, data *decoded, src string) {
	if head {
		fl.Batch().Detach()
	}
	f.flights.Finish(fl, fetched{data, src}, nil)
}

// await waits for fl's result, or for ctx, and gives back the caller's
// reference to fl; the chunk it returns carries a reference of its own,
// which the caller drops. (flight.Group.Wait would give the reference
// back before handing over the value, which release may have dropped.)
func (f *Fetcher) await(ctx context.Context, fl *chunkFlight) (fetched, error) {
	defer f.flights.Leave(fl)
	select {
	case <-fl.Ready():
	case <-ctx.Done():
		return fetched{}, ctx.Err()
	}
	got, err := fl.Result()
	if err == nil && got.data != nil {
		got.data.hold()
	}
	return got, err
}

// failed finishes fl with err; later readers of the chunk start afresh.
func (f *Fetcher) failed(fl *chunkFlight, err error) {
	f.flights.Finish(fl, fetched{}, err)
}
