package plain

import (
	"os"
	"testing"

	"damselfly/rafs/bufpool"
)

func TestMain(m *testing.M) {
	// A buffer used after it went back to the pool reads as garbage.
	bufpool.Poison(true)
	os.Exit(m.Run())
}
