package ingest

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestGracefulShutdownUnderLoad sends SIGTERM while dead letters pour in:
// dlq must exit 0 in time, having committed and acknowledged everything it
// had received, so that rows + ready messages account for every publish
// exactly and nothing is left unacknowledged. A second life then drains
// the rest.
func TestGracefulShutdownUnderLoad(t *testing.T) {
	const n = 20000
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.rejecter(ctx)

	p := h.start()
	h.waitReady(p, 30*time.Second)
	pub := h.publish(ctx, n, 4000, viaTTL, viaReject, viaDirect)
	dlqtest.Eventually(t, 60*time.Second, func() bool { return h.rowCount() >= 4000 },
		"ingest did not get under way: %d rows", h.rowCount())

	code, took := p.Term(t, 45*time.Second)
	require.Equal(t, 0, code, "exit code after SIGTERM")
	// ShutdownTimeout defaults to 30s; a clean drain takes far less.
	require.Less(t, took, 30*time.Second)
	require.NotEmpty(t, h.logLines(`"shutdown complete"`), "dlq did not log the end of its shutdown")
	stored := h.rowCount()
	t.Logf("SIGTERM at %d rows; exited 0 in %s", stored, took.Round(time.Millisecond))

	// Let every publish land in dlq's queue, then account for all of them.
	pub.Wait(t, 60*time.Second)
	// With no consumer attached nothing can be unacknowledged: whatever
	// dlq had left so would be ready again, and counted twice below.
	// A dead letter can still be on its way (in the rejecter's hands, or
	// between a source queue and dlq's), so the sum may take a moment to
	// reach the total; it must never exceed it.
	confirmed, indeterminate := h.ledger.Counts()
	require.Zero(t, indeterminate)
	var q map[string]queueState
	ready := 0
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		q = h.waitNoConsumer()
		ready = q[h.queue].Ready
		require.LessOrEqual(t, stored+ready, confirmed, "stored %d + ready %d > published %d: a message counted twice", stored, ready, confirmed)
		return stored+ready == confirmed
	}, "stored %d + ready %d != published %d; queues %v", stored, ready, confirmed, q)
	require.Equal(t, stored, h.rowCount(), "rows changed after dlq exited")
	t.Logf("after exit: stored %d + ready %d = published %d, no consumer attached", stored, ready, confirmed)
	mid := h.check()
	require.Zero(t, mid.Duplicated, "duplicates after the graceful stop: %s", mid)
	require.Zero(t, mid.Unexpected, "unexpected rows after the graceful stop: %s", mid)
	require.Equal(t, ready, mid.Lost, "every id not stored must still be in the queue: %s", mid)

	h.drainInANewLife()
}

// TestServerSideCancel deletes dlq's own queue under a running dlq. The
// broker cancels the subscription; dlq must re-declare its queue, bind it
// to the exchange again and ingest dead letters published afterwards, by
// itself. (RabbitMQ 3.10 can refuse to re-declare a quorum queue right
// after deleting it, so recovery is polled with a deadline.)
func TestServerSideCancel(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := h.start()
	h.waitReady(p, 30*time.Second)

	before := h.publish(ctx, 1000, 0, viaDirect)
	before.Wait(t, 30*time.Second)
	dlqtest.Eventually(t, 30*time.Second, func() bool { return h.rowCount() >= 1000 },
		"first dead letters not stored: %d rows", h.rowCount())

	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	_, err := ch.QueueDelete(h.queue, false, false, false)
	require.NoError(t, err)
	deleted := time.Now()

	// Back: the queue exists, dlq consumes from it, and it is bound to the
	// exchange again (a new binding: deleting the queue removed the old).
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		c, err := conn.Channel()
		if err != nil {
			return false
		}
		defer c.Close()
		q, err := c.QueueDeclarePassive(h.queue, true, false, false, false, nil)
		return err == nil && q.Consumers >= 1
	}, "dlq did not re-declare and consume %s", h.queue)
	dlqtest.Eventually(t, 60*time.Second, func() bool { return h.bound() },
		"queue %s not bound to %s again", h.queue, h.exchange)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		code, _, err := h.httpGet("/readyz")
		return err == nil && code == http.StatusOK
	}, "dlq not ready after its queue came back")
	t.Logf("queue re-declared, bound and consumed again %s after deletion", time.Since(deleted).Round(time.Millisecond))

	after := h.publish(ctx, 2000, 0, viaDirect)
	after.Wait(t, 30*time.Second)
	h.waitDrained(60 * time.Second)
	require.False(t, p.Done(), "dlq exited: %v", p.Err())
	h.stopGracefully(p)
	h.requireQueuesEmpty()
	h.requireExact(h.check())
}

// TestServeThatCannotListenSettlesIngest: `dlq serve` subscribes before it
// builds and opens its HTTP port, so a start-up that fails there (the port
// is taken) has ingest running. It must stop ingest in the written order
// and exit non-zero saying which address: what it stored is stored once,
// the rest is ready in the queue, and a second life drains it exactly.
func TestServeThatCannotListenSettlesIngest(t *testing.T) {
	const n = 5000
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	backlog := h.publish(ctx, n, 0, viaDirect)
	backlog.Wait(t, 120*time.Second)

	ln, err := net.Listen("tcp", h.httpAddr)
	require.NoError(t, err, "hold dlq's HTTP address")
	p := h.start()
	select {
	case <-p.Exited():
	case <-time.After(60 * time.Second):
		t.Fatal("dlq serve kept running with its HTTP address taken")
	}
	require.NoError(t, ln.Close())
	var exit *exec.ExitError
	require.ErrorAs(t, p.Err(), &exit, "dlq serve with its HTTP address taken")
	require.NotZero(t, exit.ExitCode())
	require.NotEmpty(t, h.logLines("listen on "+h.httpAddr), "the error names the address it could not listen on")

	stored := h.rowCount()
	confirmed, indeterminate := h.ledger.Counts()
	require.Zero(t, indeterminate)
	// RabbitMQ puts back what the dead process held unacknowledged once it
	// has seen its connection go, which on a loaded machine comes after the
	// consumers are gone from the queue: wait for every message to be
	// stored or ready again, and say how long it took.
	exited := time.Now()
	var q map[string]queueState
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		q = h.liveCounts()
		return q[h.queue].Consumers == 0 && stored+q[h.queue].Ready == confirmed
	}, "%s", lazyf(func() string {
		return fmt.Sprintf("stored %d + ready %d against published %d (queues %v)", stored, q[h.queue].Ready, confirmed, q)
	}))
	t.Logf("RabbitMQ had every message not stored ready again %s after dlq exited", time.Since(exited).Round(time.Millisecond))
	mid := h.check()
	require.Zero(t, mid.Duplicated, "duplicates after the failed start: %s", mid)
	require.Zero(t, mid.Unexpected, "unexpected rows after the failed start: %s", mid)
	t.Logf("the failed start stored %d of %d and left the rest ready", stored, confirmed)

	h.drainInANewLife()
}

// lazyf formats as what its function returns when formatted: a failure
// message that shows the values of the last poll, not those of the call.
type lazyf func() string

func (f lazyf) String() string { return f() }
