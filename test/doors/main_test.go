package doors_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: HTTP servers, the control router and
// its subscriptions, connections and pools.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
