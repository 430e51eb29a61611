package fusemount

import (
	"os"
	"testing"

	"damselfly/rafs/bufpool"
)

func TestMain(m *testing.M) {
	// A chunk buffer used after it went back to the pool reads as
	// garbage, which the tests that compare what they read notice.
	bufpool.Poison(true)
	os.Exit(m.Run())
}
