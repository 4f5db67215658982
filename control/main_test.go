package control_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: servers, pools, connections and their
// goroutines.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
