package fusemount

import "damselfly/rafs/flight"

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
type fetched struct {
	data []byte
	src  string
}

// arrived finishes fl with the chunk's bytes. The head of a run detaches
// it first, so that the head's readers, woken, cannot cancel its tail.
func (f *Fetcher) arrived(fl *chunkFlight, head bool, data []byte, src string) {
	if head {
		fl.Batch().Detach()
	}
	f.flights.Finish(fl, fetched{data, src}, nil)
}

// failed finishes fl with err; later readers of the chunk start afresh.
func (f *Fetcher) failed(fl *chunkFlight, err error) {
	f.flights.Finish(fl, fetched{}, err)
}
