//go:build !faults

// This file runs in the normal suite: it kills only its own dlq processes.
// It is left out of the fault pass (-tags faults -run Fault) so that its
// TestFault name does not make it run twice.

package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"
)

// TestFaultKill9 kills dlq with SIGKILL at random points while dead letters
// arrive by three routes, restarts it each time, and requires every dead
// letter stored exactly once at the end. The kills land during start-up,
// while consuming, between commit and acknowledgement, and while
// redeliveries of a previous life are being recognised.
func TestFaultKill9(t *testing.T) {
	const (
		n     = 24000
		rate  = 2000 // dead letters per second: arrivals last about 12 s
		kills = 12
	)
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.rejecter(ctx)

	p := h.start()
	h.waitReady(p, 30*time.Second)
	pub := h.publish(ctx, n, rate, viaTTL, viaReject, viaDirect, viaDirect)

	var trace []string
	k := 0
	for {
		if k >= kills && isClosed(pub.Done()) {
			break
		}
		if k%2 == 0 {
			// A random point 100 ms to 2.5 s into this process's life:
			// during start-up, while redeliveries of the previous life are
			// matched, mid-batch.
			time.Sleep(100*time.Millisecond + rand.N(2400*time.Millisecond))
		} else {
			// Soon after this life's first commits, so that kills also land
			// between commits and their acknowledgements (the window in
			// which a redelivery must be recognised, not stored again).
			h.afterNextCommit(300 * time.Millisecond)
		}
		p.Kill9(t)
		k++
		trace = append(trace, fmt.Sprintf("kill %d: %d rows", k, h.rowCount()))
		p = h.start()
	}
	t.Logf("%s", strings.Join(trace, "; "))
	pub.Wait(t, 60*time.Second)

	h.waitReady(p, 30*time.Second)
	h.waitDrained(90 * time.Second)
	h.stopGracefully(p)
	h.requireQueuesEmpty()
	c := h.check()
	t.Logf("after %d kills and a graceful stop, ingest_inflight holds %d batches (harmless: rows of batches whose acknowledgement was never confirmed)", k, h.inflightCount())
	h.requireExact(c)
	if c.Confirmed < n*9/10 {
		t.Fatalf("only %d of %d publishes confirmed: the test did not exercise what it claims", c.Confirmed, n)
	}
}

func isClosed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// afterNextCommit returns soon after dlq's next commit: once the row
// count moves (or 8 s pass), after a random part of jitter. A kill then
// lands between a commit and its acknowledgements, the window in which a
// redelivery must be recognised, not stored again.
func (h *harness) afterNextCommit(jitter time.Duration) {
	rows, deadline := h.rowCount(), time.Now().Add(8*time.Second)
	for h.rowCount() == rows && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	time.Sleep(rand.N(jitter))
}
