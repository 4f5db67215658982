package replay_test

import (
	"os"
	"testing"

	"go.uber.org/goleak"
)

// Every test stops what it started: the runner loop, task runs, the
// control router and its subscriptions.
func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
