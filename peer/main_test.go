package peer

import (
	"testing"

	"go.uber.org/goleak"

	"damselfly/rafs/bufpool"
)

func TestMain(m *testing.M) {
	// A buffer used after it went back to the pool reads as garbage.
	bufpool.Poison(true)
	goleak.VerifyTestMain(m)
}
