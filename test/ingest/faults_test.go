//go:build faults

// These tests restart the shared PostgreSQL and RabbitMQ or close every
// broker connection: they break any other test running at the same time.
// The Makefile runs them alone (go test -tags faults -run Fault -p 1).
// Each one puts its server back however it ends. The commands they use
// can be overridden (DLQ_TEST_RABBITMQCTL, DLQ_TEST_PG_STOP,
// DLQ_TEST_PG_START; see package dlqtest).

package ingest

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os/exec"
	"strconv"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
)

// ensurePostgres starts PostgreSQL if it is down, whatever the test did.
func ensurePostgres(t *testing.T) {
	if dlqtest.PostgresUp() {
		return
	}
	cmd, err := dlqtest.PostgresCommand("start")
	if err == nil {
		var out []byte
		if out, err = exec.Command("sh", "-c", cmd).CombinedOutput(); err != nil {
			err = fmt.Errorf("%q: %w: %s", cmd, err, out)
		}
	}
	if err != nil {
		t.Errorf("could not start PostgreSQL again: %v", err)
	}
}

// ensureRabbit starts the RabbitMQ application if it is stopped.
func ensureRabbit(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	if out, err := dlqtest.Rabbitmqctl(ctx, "start_app").CombinedOutput(); err != nil {
		t.Errorf("could not start RabbitMQ again: %v: %s", err, out)
		return
	}
	_ = dlqtest.Rabbitmqctl(ctx, "await_startup", "--timeout", "120").Run()
}

// TestFaultPostgresRestart stops PostgreSQL while dead letters arrive, keeps
// it down for a few seconds, and starts it again. While it is down dlq must
// stop pulling (unacknowledged deliveries never above consumers ×
// prefetch), say so on /readyz and in dlq_up{component="postgres"}, and
// afterwards resume by itself with nothing lost or doubled.
func TestFaultPostgresRestart(t *testing.T) {
	const (
		consumers = 2
		prefetch  = 300
		bound     = consumers * prefetch
	)
	if _, err := dlqtest.PostgresCommand("stop"); err != nil {
		t.Fatalf("cannot restart PostgreSQL here: %v", err)
	}
	h := newHarness(t)
	h.env["DLQ_CONSUMERS"] = strconv.Itoa(consumers)
	h.env["DLQ_PREFETCH"] = strconv.Itoa(prefetch)
	h.env["DLQ_BATCH_SIZE"] = "150"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := h.start()
	h.waitReady(p, 30*time.Second)
	pub := h.publish(ctx, 30000, 2500, viaTTL, viaDirect)
	dlqtest.Eventually(t, 60*time.Second, func() bool { return h.rowCount() >= 3000 },
		"ingest did not get under way: %d rows", h.rowCount())

	t.Cleanup(func() { ensurePostgres(t) })
	dlqtest.RunPostgres(t, "stop")
	down := time.Now()
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		code, _, err := h.httpGet("/readyz")
		return err == nil && code == http.StatusServiceUnavailable
	}, "/readyz did not turn 503 while PostgreSQL was down")
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		v, err := h.metric(`dlq_up{component="postgres"}`)
		return err == nil && v == 0
	}, `dlq_up{component="postgres"} did not drop to 0`)
	// rabbitmqctl's quorum-queue figures refresh every few seconds, so
	// keep sampling for a while: every sample is a true past value.
	maxUnacked, samples := 0, []string{}
	for time.Since(down) < 10*time.Second {
		c := h.unackedCounts()[h.queue]
		maxUnacked = max(maxUnacked, c[1])
		samples = append(samples, fmt.Sprintf("%s: ready %d unacked %d", time.Since(down).Round(100*time.Millisecond), c[0], c[1]))
	}
	t.Logf("PostgreSQL down, %s: %s", h.queue, strings.Join(samples, "; "))
	require.LessOrEqual(t, maxUnacked, bound, "unacknowledged deliveries above consumers × prefetch while PostgreSQL was down")
	require.Positive(t, maxUnacked, "no sample saw dlq holding deliveries: the bound was not observed")
	require.False(t, p.Done(), "dlq exited while PostgreSQL was down: %v", p.Err())
	dlqtest.RunPostgres(t, "start")
	t.Logf("PostgreSQL was down for %s", time.Since(down).Round(time.Millisecond))

	dlqtest.Eventually(t, 60*time.Second, func() bool {
		code, _, err := h.httpGet("/readyz")
		return err == nil && code == http.StatusOK
	}, "/readyz did not return to 200 after PostgreSQL came back")
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		v, err := h.metric(`dlq_up{component="postgres"}`)
		return err == nil && v == 1
	}, `dlq_up{component="postgres"} did not return to 1`)

	pub.Wait(t, 120*time.Second)
	h.waitDrained(120 * time.Second)
	h.stopGracefully(p)
	h.requireQueuesEmpty()
	h.requireExact(h.check())
}

// TestFaultCloseAllConnections makes RabbitMQ close every connection
// several times during ingest. dlq must reconnect by itself, never
// acknowledge a delivery tag of a dead channel (RabbitMQ would answer
// PRECONDITION_FAILED "unknown delivery tag") and store every dead letter
// exactly once.
func TestFaultCloseAllConnections(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	h.rejecter(ctx)
	p := h.start()
	h.waitReady(p, 30*time.Second)
	pub := h.publish(ctx, 24000, 2000, viaTTL, viaReject, viaDirect)

	const closes = 5
	for i := 0; i < closes; i++ {
		time.Sleep(time.Second + rand.N(1500*time.Millisecond))
		dlqtest.RunRabbitmqctl(t, 60*time.Second, "close_all_connections", "dlq fault test: close_all_connections")
		t.Logf("closed all connections (%d of %d) at %d rows", i+1, closes, h.rowCount())
	}
	pub.Wait(t, 120*time.Second)
	h.waitReady(p, 60*time.Second)
	h.waitDrained(120 * time.Second)
	require.False(t, p.Done(), "dlq exited: %v", p.Err())
	h.stopGracefully(p)
	h.requireQueuesEmpty()

	require.NotEmpty(t, h.logLines("connection lost"), "dlq never saw its connection closed: the test did not test")
	for _, bad := range []string{"unknown delivery tag", "PRECONDITION_FAILED"} {
		require.Empty(t, h.logLines(bad), "dlq's log mentions %q", bad)
	}
	h.requireExact(h.check())
}

// TestFaultBrokerRestart stops and starts the RabbitMQ application while
// dlq drains a backlog. The backlog sits in dlq's quorum queue, which
// survives; dlq must come back by itself and store everything once, the
// backlog and what is published after the restart.
func TestFaultBrokerRestart(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	// Published in full before the restart, straight to the exchange, so
	// every publish is confirmed by the quorum queue itself.
	backlog := h.publish(ctx, 20000, 0, viaDirect)
	backlog.Wait(t, 120*time.Second)
	p := h.start()
	h.waitReady(p, 30*time.Second)
	dlqtest.Eventually(t, 60*time.Second, func() bool { return h.rowCount() >= 2000 },
		"ingest did not get under way: %d rows", h.rowCount())

	t.Cleanup(func() { ensureRabbit(t) })
	dlqtest.RunRabbitmqctl(t, 120*time.Second, "stop_app")
	stopped := time.Now()
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		code, _, err := h.httpGet("/readyz")
		return err == nil && code == http.StatusServiceUnavailable
	}, "/readyz did not turn 503 while RabbitMQ was stopped")
	dlqtest.RunRabbitmqctl(t, 120*time.Second, "start_app")
	dlqtest.RunRabbitmqctl(t, 180*time.Second, "await_startup", "--timeout", "150")
	t.Logf("RabbitMQ was stopped for %s, at %d rows", time.Since(stopped).Round(time.Millisecond), h.rowCount())

	h.waitReady(p, 90*time.Second)
	after := h.publish(ctx, 5000, 0, viaDirect)
	after.Wait(t, 120*time.Second)
	h.waitDrained(120 * time.Second)
	require.False(t, p.Done(), "dlq exited: %v", p.Err())
	h.stopGracefully(p)
	h.requireQueuesEmpty()
	h.requireExact(h.check())
}

// TestFaultReplayUnderMemoryAlarm: a replay that publishes during a
// RabbitMQ memory alarm gets its connection blocked (RabbitMQ stops
// reading it), and ingest goes on: its acknowledgements travel on another
// connection. On one shared connection they stopped with the replay's
// publish, and nothing drained dlq's queue while the alarm lasted.
func TestFaultReplayUnderMemoryAlarm(t *testing.T) {
	h := newHarness(t)
	h.env["DLQ_ADMIN_TOKEN"] = testAdminToken
	h.env["DLQ_REPLAY_POLL_INTERVAL"] = "50ms"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	held, target := dlqtest.Name(t, "held"), dlqtest.Name(t, "target")
	_, err := ch.QueueDeclare(held, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": h.exchange})
	require.NoError(t, err)
	_, err = ch.QueueDeclare(target, true, false, false, false, nil)
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, conn, held, target)
	require.NoError(t, ch.Confirm(false))
	publish := func(exchange, key string, n int) {
		for i := range n {
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp.Publishing{
				DeliveryMode: amqp.Persistent, MessageId: fmt.Sprintf("%s-%s-%d", key, h.runID, i), Body: []byte("alarm " + h.runID)})
			require.NoError(t, err)
			ok, err := dc.WaitContext(ctx)
			require.NoError(t, err)
			require.True(t, ok)
		}
	}
	p := h.start()
	h.waitReady(p, 30*time.Second)
	publish(h.exchange, "orders", 3) // stored: what the replay sends
	dlqtest.Eventually(t, 30*time.Second, func() bool { return h.rowCount() == 3 }, "the replay's messages were not stored")
	publish("", held, 400) // dead-lettered once the alarm is on

	dlqtest.RunRabbitmqctl(t, 60*time.Second, "set_vm_memory_high_watermark", "0.0000001")
	t.Cleanup(func() { dlqtest.RunRabbitmqctl(t, 60*time.Second, "set_vm_memory_high_watermark", "0.4") })
	var ids []int64
	require.NoError(t, h.db.QueryRow(ctx, `SELECT array_agg(id) FROM dead_messages`).Scan(&ids))
	_, err = h.apiCall(http.MethodPost, "/api/v1/replays", map[string]any{
		"ids": ids, "target": map[string]string{"exchange": "", "routing_key": target},
	}, nil)
	require.NoError(t, err)
	var states string
	blocked := func() bool {
		// RabbitMQ 3.10 shows the client's connection name among its
		// properties only.
		out, err := dlqtest.Rabbitmqctl(ctx, "list_connections", "client_properties", "state").CombinedOutput()
		require.NoError(t, err, "%s", out)
		states = string(out)
		for _, line := range strings.Split(states, "\n") {
			if strings.Contains(line, `"dlq-replay"`) && strings.HasSuffix(strings.TrimSpace(line), "\tblocked") {
				return true
			}
		}
		return false
	}
	for deadline := time.Now().Add(30 * time.Second); !blocked(); {
		if time.Now().After(deadline) {
			h.dumpLog(40)
			t.Fatalf("the replay's connection was never blocked (the test did not test): %s", states)
		}
		time.Sleep(200 * time.Millisecond)
	}

	proctest.Rejecter(ctx, dlqtest.AMQPURL(), held)
	dlqtest.Eventually(t, 60*time.Second, func() bool { return h.rowCount() == 403 },
		"ingest stopped while the replay's connection was blocked: %d of 403 rows", h.rowCount())
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		out, err := dlqtest.Rabbitmqctl(ctx, "list_queues", "name", "messages").CombinedOutput()
		require.NoError(t, err, "%s", out)
		for _, line := range strings.Split(string(out), "\n") {
			if f := strings.Fields(line); len(f) == 2 && f[0] == h.queue {
				return f[1] == "0"
			}
		}
		return false
	}, "dlq's queue still holds unacknowledged dead letters")

	dlqtest.RunRabbitmqctl(t, 60*time.Second, "set_vm_memory_high_watermark", "0.4")
	dlqtest.Eventually(t, 60*time.Second, func() bool { return dlqtest.QueueDepth(t, conn, target) == 3 },
		"the replay did not finish once the alarm cleared")
	h.stopGracefully(p)
}
