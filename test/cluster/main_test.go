//go:build cluster

package cluster

import (
	"fmt"
	"os"
	"sync"
	"testing"

	"github.com/dlq/dlq/internal/proctest"
)

// dlqBin is the dlq binary under test, built once for the package.
var dlqBin string

// rabbit is the three-node RabbitMQ cluster, started by the first test
// that needs it and stopped when the package's tests end.
var (
	rabbitOnce sync.Once
	rabbit     *rabbitCluster
	rabbitErr  error
)

func TestMain(m *testing.M) {
	code := proctest.RunWithDLQ(m, &dlqBin)
	if rabbit != nil {
		if err := rabbit.stop(); err != nil {
			fmt.Fprintln(os.Stderr, "stop the RabbitMQ cluster:", err)
			code = max(code, 1)
		}
	}
	os.Exit(code)
}

// rabbitNodes returns the test cluster, starting it on first use.
func rabbitNodes(t *testing.T) *rabbitCluster {
	t.Helper()
	rabbitOnce.Do(func() { rabbit, rabbitErr = startRabbitCluster(3, t.Logf) })
	if rabbitErr != nil {
		t.Fatalf("start a RabbitMQ cluster: %v", rabbitErr)
	}
	return rabbit
}
