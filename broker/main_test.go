package broker_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: a Conn's reconnect loop, publishers
// and their confirmation listeners, the write gatherer's timers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
