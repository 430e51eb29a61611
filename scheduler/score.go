package scheduler

// Ranking. A parent's score for a requester is
//
//	locality × health × speed × headroom / (1 + busy) × jitter
//
// and parents are chosen greedily by coverage × score (see Parents):
//
//   - locality: 4 on the requester's host, 2 in its rack, 1.5 in its zone,
//     1 elsewhere (by the LabelHost, LabelRack, LabelZone labels; a rack
//     matches only within the same zone, or where zones are unset).
//   - health: 0.05 + 0.95·s², s the moving average of report outcomes
//     (1 = OK), so failures bite fast; never 0, so that a peer that is the
//     only holder is still offered ("no candidate parents" while a peer
//     had the data is what this design must not do).
//   - speed: reported throughput over Config.RefThroughput, clamped to
//     [0.25, 1]; 1 until a throughput has been reported, so newcomers get
//     tried.
//   - headroom: 1 − upload rate / upload capacity from the last
//     heartbeat, clamped to [0.1, 1]; 1 when capacity is unknown.
//   - busy: the larger of the uploads the peer reported and the
//     assignments made to it and not yet reported or timed out. Counting
//     assignments at once is what spreads concurrent requesters: the
//     second query in the same millisecond already sees the first.
//   - jitter: uniform in [1−J/2, 1+J/2), J = Config.Jitter, from the
//     injected random source, so near-equal peers share the load instead
//     of the first in memory order taking it all.
//
// Load and health only ever lower a score, never exclude: an overloaded or
// flaky holder still beats sending the requester to origin. (A parent at
// its cap of children is passed over only while a future holder of the
// chunks can serve the requester soon instead; see tree.go.)

const (
	weightHost = 4.0
	weightRack = 2.0
	weightZone = 1.5
)

// locality returns the locality weight of parent p for requester r.
func locality(r, p *peerHot) float64 {
	switch {
	case r.host != 0 && r.host == p.host:
		return weightHost
	case r.rack != 0 && r.rack == p.rack && r.zone == p.zone:
		return weightRack
	case r.zone != 0 && r.zone == p.zone:
		return weightZone
	}
	return 1
}

// quality is the requester-independent part of p's score.
func (s *State) quality(p *peer) float64 {
	health := 0.05 + 0.95*p.success*p.success
	speed := 1.0
	if p.throughput > 0 {
		speed = clamp(p.throughput/float64(s.cfg.RefThroughput), 0.25, 1)
	}
	headroom := 1.0
	if c := p.info.UploadCapacity; c > 0 {
		headroom = clamp(1-float64(p.load.UploadBytesPerSec)/float64(c), 0.1, 1)
	}
	busy := max(p.load.ActiveUploads, p.pending)
	return health * speed * headroom / float64(1+busy)
}

// jitter is one query's stream of jitter factors: SplitMix64 from a seed
// that is the injected source's first draw combined with the query's
// number. So queries need no shared random state (they run in parallel
// under the read lock), the same sequence of calls gives the same
// factors, and drawing costs a few instructions, not a call through
// rand.Source per candidate.
type jitter struct {
	x   uint64
	amp float64
}

func (s *State) newJitter() jitter {
	n := s.queries.Add(1)
	return jitter{x: mix64(s.seed ^ mix64(n)), amp: s.cfg.Jitter}
}

// next returns a factor in [1-amp/2, 1+amp/2).
func (j *jitter) next() float64 {
	if j.amp == 0 {
		return 1
	}
	j.x += 0x9e3779b97f4a7c15
	u := float64(int64(mix64(j.x)>>11)) / (1 << 53) // via int64: the same value, converted in one instruction
	return 1 + j.amp*(u-0.5)
}

// uint64 returns a uniform 64-bit value from the stream (Jitter 0 or not).
func (j *jitter) uint64() uint64 {
	j.x += 0x9e3779b97f4a7c15
	return mix64(j.x)
}

func clamp(x, lo, hi float64) float64 { return min(max(x, lo), hi) }
