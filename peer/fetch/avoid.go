package fetch

import (
	"time"

	lpeer "github.com/libp2p/go-libp2p/core/peer"
)

// maxAvoided bounds each avoid list.
const maxAvoided = 4096

// avoidList is peers this node does not ask until a time. Guarded by
// Engine.mu.
type avoidList map[lpeer.ID]time.Time

// avoids reports whether l avoids p at now, forgetting p once its time
// passed.
func (l avoidList) avoids(p lpeer.ID, now time.Time) bool {
	until, ok := l[p]
	if ok && now.After(until) {
		delete(l, p)
		return false
	}
	return ok
}

// add avoids p until now+d. A full list first forgets the expired; one
// still full takes no more.
func (l avoidList) add(p lpeer.ID, now time.Time, d time.Duration) {
	if len(l) >= maxAvoided {
		for id, until := range l {
			if now.After(until) {
				delete(l, id)
			}
		}
	}
	if len(l) < maxAvoided {
		l[p] = now.Add(d)
	}
}

// Avoided reports whether the engine avoids p for having sent bad bytes.
func (e *Engine) Avoided(p lpeer.ID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.avoid.avoids(p, e.now())
}

// AvoidBad stops the engine asking p for AvoidDuration: it sent bad
// bytes (or a broken piece table).
func (e *Engine) AvoidBad(p lpeer.ID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.avoid.add(p, e.now(), e.cfg.AvoidDuration)
}

// avoidSlow stops the engine asking p for SlowAvoidDuration.
func (e *Engine) avoidSlow(p lpeer.ID) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.slow.add(p, e.now(), e.cfg.SlowAvoidDuration)
}

// Skips reports whether the engine does not ask p now: it sent bad
// bytes, or it stalled lately.
func (e *Engine) Skips(p lpeer.ID) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	now := e.now()
	bad := e.avoid.avoids(p, now)
	slow := e.slow.avoids(p, now)
	return bad || slow
}

// avoidSnapshot returns, for the planner, until when each avoided peer
// is avoided (the later of its two times).
func (e *Engine) avoidSnapshot() map[lpeer.ID]time.Time {
	e.mu.Lock()
	defer e.mu.Unlock()
	if len(e.avoid) == 0 && len(e.slow) == 0 {
		return nil
	}
	out := make(map[lpeer.ID]time.Time, len(e.avoid)+len(e.slow))
	for _, l := range []avoidList{e.avoid, e.slow} {
		for id, until := range l {
			if until.After(out[id]) {
				out[id] = until
			}
		}
	}
	return out
}
