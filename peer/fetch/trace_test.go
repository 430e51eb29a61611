package fetch

import (
	"bytes"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"
)

// A fetch that took slowFetch or more is logged with what it did; a
// faster one is not.
func TestLogSlowFetch(t *testing.T) {
	var buf bytes.Buffer
	n := &Engine{log: slog.New(slog.NewTextHandler(&buf, nil))}
	g := &group{pending: map[uint32]wanted{7: {}}}
	g.tr.start, g.tr.chunks = time.Now(), 3
	n.logSlow(g)
	if buf.Len() != 0 {
		t.Fatalf("a fast fetch was logged: %s", buf.String())
	}
	g.tr.start = time.Now().Add(-slowFetch - time.Second)
	g.tr.rounds.Add(2)
	g.tr.answers.Add(5)
	g.tr.waits.Add(4)
	g.tr.turns.Add(1)
	g.lastErr = errors.New("peer x: stream reset")
	n.logSlow(g)
	out := buf.String()
	for _, want := range []string{"level=WARN", `msg="slow fetch"`, "chunks=3", "left=1", "rounds=2", "answers=5",
		"waited_chunks=4", "origin_turns=1", `last_err="peer x: stream reset"`} {
		if !strings.Contains(out, want) {
			t.Errorf("log line lacks %s: %s", want, out)
		}
	}
}
