package consumer_test

import (
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: consumers, their sessions and writers,
// and the connections under them.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
