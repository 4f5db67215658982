package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
	"github.com/dlq/dlq/store"
)

// dlqBin is the dlq binary under test, built once for the package.
var dlqBin string

func TestMain(m *testing.M) {
	os.Exit(proctest.RunWithDLQ(m, &dlqBin))
}

// harness is one isolated dlq deployment: its own schema, dead-letter
// exchange, dlq queue, control queue, source queues and HTTP port, and the
// dlq processes started on them (one at a time).
type harness struct {
	t        *testing.T
	st       *store.Store
	dsn      string
	db       *pgxpool.Pool // the test's own pool on st's schema, for SQL (dlqtest.DB)
	exchange string
	queue    string
	control  string
	// ttlQueue is a classic source queue whose messages expire at once;
	// rejectQueue a quorum source queue whose messages the test's rejecter
	// dead-letters.
	ttlQueue    string
	rejectQueue string
	httpAddr    string
	logPath     string
	env         map[string]string
	runID       string
	// ledger holds every publish of every publisher of the test.
	ledger *proctest.Ledger

	mu         sync.Mutex
	starts     int
	publishers int
	cur        *proctest.Proc
}

func newHarness(t *testing.T) *harness {
	t.Helper()
	st, dsn := dlqtest.Store(t)
	h := &harness{
		t:           t,
		st:          st,
		dsn:         dsn,
		db:          dlqtest.DB(t, dsn),
		exchange:    dlqtest.Name(t, "dlx"),
		queue:       dlqtest.Name(t, "dlq"),
		control:     dlqtest.Name(t, "ctl"),
		ttlQueue:    dlqtest.Name(t, "src_ttl"),
		rejectQueue: dlqtest.Name(t, "src_rej"),
		httpAddr:    proctest.FreeAddr(t),
		logPath:     filepath.Join(t.TempDir(), "dlq.log"),
		env:         map[string]string{},
		runID:       fmt.Sprintf("r%08x", rand.Uint32()),
		ledger:      proctest.NewLedger(),
	}
	// Cleanups run last-in first-out: the process stops before its queues go.
	t.Cleanup(h.cleanupBroker)
	t.Cleanup(func() {
		if t.Failed() {
			h.dumpLog(200)
		}
		// DLQ_TEST_KEEP_LOGS=dir keeps every test's whole dlq output.
		if dir := os.Getenv("DLQ_TEST_KEEP_LOGS"); dir != "" {
			if b, err := os.ReadFile(h.logPath); err == nil {
				_ = os.WriteFile(filepath.Join(dir, h.runID+"-"+strings.ReplaceAll(t.Name(), "/", "_")+".log"), b, 0o644)
			}
		}
	})
	h.declare()
	return h
}

// declare sets up the broker side before any dlq runs, so that no dead
// letter published by the test is dropped for want of a route: the
// exchange, dlq's queue (with dlq's own arguments) bound with "#", and the
// source queues.
func (h *harness) declare() {
	h.t.Helper()
	conn := dlqtest.Dial(h.t)
	ch := dlqtest.Channel(h.t, conn)
	version, _ := conn.Properties["version"].(string)
	require.NoError(h.t, ch.ExchangeDeclare(h.exchange, "topic", true, false, false, false, nil))
	_, err := ch.QueueDeclare(h.queue, true, false, false, false, broker.OwnQueueArgs(version))
	require.NoError(h.t, err)
	require.NoError(h.t, ch.QueueBind(h.queue, "#", h.exchange, false, nil))
	_, err = ch.QueueDeclare(h.ttlQueue, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-message-ttl": int32(0), "x-dead-letter-exchange": h.exchange,
	})
	require.NoError(h.t, err)
	_, err = ch.QueueDeclare(h.rejectQueue, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": h.exchange,
	})
	require.NoError(h.t, err)
}

// cleanupBroker deletes the test's queues and exchange on a fresh
// connection (fault tests may have killed every earlier one).
func (h *harness) cleanupBroker() {
	conn, err := dialRetry(30 * time.Second)
	if err != nil {
		return
	}
	defer conn.Close()
	proctest.DeleteTopology(conn, []string{h.queue, h.control, h.ttlQueue, h.rejectQueue}, []string{h.exchange})
}

func dialRetry(timeout time.Duration) (*amqp.Connection, error) {
	deadline := time.Now().Add(timeout)
	for {
		conn, err := amqp.Dial(dlqtest.AMQPURL())
		if err == nil || time.Now().After(deadline) {
			return conn, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// processEnv is the DLQ_* environment of a dlq process.
func (h *harness) processEnv() map[string]string {
	vars := map[string]string{
		"DLQ_DATABASE_URL":  h.dsn,
		"DLQ_AMQP_URL":      dlqtest.AMQPURL(),
		"DLQ_EXCHANGE":      h.exchange,
		"DLQ_QUEUES":        h.queue,
		"DLQ_CONTROL_QUEUE": h.control,
		"DLQ_HTTP_ADDR":     h.httpAddr,
		"DLQ_LOG_FORMAT":    "json",
	}
	for k, v := range h.env {
		vars[k] = v
	}
	return vars
}

// start runs `dlq serve`; its output is appended to the test's log file.
func (h *harness) start() *proctest.Proc {
	h.t.Helper()
	return h.startArgs("serve")
}

// startArgs runs `dlq args...` as start does.
func (h *harness) startArgs(args ...string) *proctest.Proc {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.True(h.t, h.cur == nil || h.cur.Done(), "start: a dlq process is still running")
	h.starts++
	p := proctest.Start(h.t, proctest.Options{Bin: dlqBin, Args: args, Env: h.processEnv(), Log: h.logPath, N: h.starts})
	h.cur = p
	return p
}

// httpGet fetches path from the running dlq's HTTP server.
func (h *harness) httpGet(path string) (int, string, error) { return proctest.Get(h.httpAddr, path) }

// drainInANewLife starts dlq again after an earlier life ended, lets it
// drain what that one left, stops it gracefully and requires every publish
// stored exactly once and the queues empty.
func (h *harness) drainInANewLife() {
	h.t.Helper()
	p := h.start()
	h.waitReady(p, 30*time.Second)
	h.waitDrained(60 * time.Second)
	h.stopGracefully(p)
	h.requireQueuesEmpty()
	h.requireExact(h.check())
}

// waitReady polls /readyz until it answers 200.
func (h *harness) waitReady(p *proctest.Proc, timeout time.Duration) {
	h.t.Helper()
	proctest.WaitReady(h.t, p, h.httpAddr, timeout)
}

// metric returns the value of one sample from /metrics, e.g.
// `dlq_up{component="postgres"}`.
func (h *harness) metric(sample string) (float64, error) { return proctest.Metric(h.httpAddr, sample) }

// logLines returns the lines of dlq's output (every start) that contain s,
// case-insensitively.
func (h *harness) logLines(s string) []string {
	b, err := os.ReadFile(h.logPath)
	if err != nil {
		return nil
	}
	var out []string
	s = strings.ToLower(s)
	for _, line := range strings.Split(string(b), "\n") {
		if strings.Contains(strings.ToLower(line), s) {
			out = append(out, line)
		}
	}
	return out
}

func (h *harness) dumpLog(tail int) {
	b, err := os.ReadFile(h.logPath)
	if err != nil {
		h.t.Logf("no dlq log: %v", err)
		return
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > tail {
		h.t.Logf("dlq output (last %d of %d lines):", tail, len(lines))
		lines = lines[len(lines)-tail:]
	} else {
		h.t.Logf("dlq output (%d lines):", len(lines))
	}
	h.t.Log("\n" + strings.Join(lines, "\n"))
}

// ---------------------------------------------------------------------------
// Publishing dead letters

// route is how a test message becomes a dead letter (proctest.Route).
const (
	viaTTL    = proctest.ViaTTL
	viaReject = proctest.ViaReject
	viaDirect = proctest.ViaDirect
)

// publish starts publishing n dead letters at rate per second (0: as fast
// as confirms come back), cycling through routes, into the test's ledger.
func (h *harness) publish(ctx context.Context, n, rate int, routes ...proctest.Route) *proctest.Publisher {
	return h.publisher(n, rate, routes...).Start(ctx)
}

// publisher is publish's publisher, not started yet.
func (h *harness) publisher(n, rate int, routes ...proctest.Route) *proctest.Publisher {
	h.mu.Lock()
	h.publishers++
	prefix := fmt.Sprintf("%s.%d", h.runID, h.publishers)
	h.mu.Unlock()
	return &proctest.Publisher{
		URLs: []string{dlqtest.AMQPURL()}, Exchange: h.exchange, TTLQueue: h.ttlQueue, RejectQueue: h.rejectQueue,
		N: n, Routes: routes, Rate: rate, Window: 250, Size: 256, Prefix: prefix, Ledger: h.ledger,
	}
}

// rejecter dead-letters everything in the reject source queue by rejecting
// it, reconnecting whenever its connection dies, until ctx ends.
func (h *harness) rejecter(ctx context.Context) {
	proctest.Rejecter(ctx, dlqtest.AMQPURL(), h.rejectQueue)
}

// ---------------------------------------------------------------------------
// Checking

// query retries fn while PostgreSQL is unreachable (fault tests restart it).
func (h *harness) query(fn func(ctx context.Context) error) {
	h.t.Helper()
	proctest.Retry(h.t, 60*time.Second, fn)
}

func (h *harness) rowCount() int {
	h.t.Helper()
	var n int
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&n)
	})
	return n
}

// inflightCount is used by the tests built without the faults tag.
//
//lint:ignore U1000 unused only in the faults build
func (h *harness) inflightCount() int {
	h.t.Helper()
	var n int
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(*) FROM ingest_inflight`).Scan(&n)
	})
	return n
}

// check reads every stored row back and counts against the ledger.
func (h *harness) check() proctest.Tally {
	h.t.Helper()
	var c proctest.Tally
	h.query(func(ctx context.Context) error {
		var err error
		c, err = proctest.Check(ctx, h.db, h.ledger)
		return err
	})
	return c
}

func (h *harness) requireExact(c proctest.Tally) {
	h.t.Helper()
	proctest.RequireExact(h.t, c, func() { h.explainDuplicates(10) })
}

// queueState is what a passive declare reports: live figures, straight
// from the queue (for quorum queues, from its leader).
type queueState struct{ Ready, Consumers int }

// liveCounts passively declares the test's queues on a fresh connection.
func (h *harness) liveCounts() map[string]queueState {
	h.t.Helper()
	conn, err := dialRetry(30 * time.Second)
	require.NoError(h.t, err)
	defer conn.Close()
	res := map[string]queueState{}
	for _, name := range []string{h.queue, h.ttlQueue, h.rejectQueue} {
		ch, err := conn.Channel()
		require.NoError(h.t, err)
		q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
		require.NoError(h.t, err, "inspect queue %s", name)
		_ = ch.Close()
		res[name] = queueState{Ready: q.Messages, Consumers: q.Consumers}
	}
	return res
}

// unackedCounts returns ready and unacknowledged counts of the test's
// queues as rabbitmqctl lists them. A passive declare cannot tell
// unacknowledged messages; rabbitmqctl can, but for quorum queues its
// figures are refreshed on the queue's periodic tick (every few seconds),
// so they are samples of the recent past, not of this instant. A busy
// quorum queue can also miss rabbitmqctl's per-queue deadline and be left
// out of a listing, so it asks again until every queue is there.
func (h *harness) unackedCounts() map[string][2]int {
	h.t.Helper()
	want := map[string]bool{h.queue: true, h.ttlQueue: true, h.rejectQueue: true}
	var res map[string][2]int
	var raw []string
	for attempt := 0; attempt < 10; attempt++ {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		out, err := dlqtest.Rabbitmqctl(ctx, "list_queues", "-q", "--no-table-headers",
			"name", "messages_ready", "messages_unacknowledged").Output()
		cancel()
		require.NoError(h.t, err, "rabbitmqctl list_queues")
		res, raw = map[string][2]int{}, nil
		sc := bufio.NewScanner(bytes.NewReader(out))
		for sc.Scan() {
			f := strings.Split(sc.Text(), "\t")
			if !want[f[0]] {
				continue
			}
			raw = append(raw, sc.Text())
			if len(f) != 3 {
				continue
			}
			r, err1 := strconv.Atoi(strings.TrimSpace(f[1]))
			u, err2 := strconv.Atoi(strings.TrimSpace(f[2]))
			if errors.Join(err1, err2) == nil {
				res[f[0]] = [2]int{r, u}
			}
		}
		if len(res) == len(want) {
			return res
		}
	}
	h.t.Fatalf("rabbitmqctl list_queues did not report all of %v; it said %q", want, raw)
	return nil
}

// waitDrained waits until every confirmed dead letter has a row and no
// message of the test's is ready in any queue. What dlq still holds
// unacknowledged is committed and acknowledged by the graceful stop that
// follows.
func (h *harness) waitDrained(timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	confirmed, _ := h.ledger.Counts()
	for h.rowCount() < confirmed {
		if time.Now().After(deadline) {
			h.t.Logf("drain: only %d rows for %d confirmed dead letters after %s", h.rowCount(), confirmed, timeout)
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		q := h.liveCounts()
		if q[h.queue].Ready == 0 && q[h.ttlQueue].Ready == 0 && q[h.rejectQueue].Ready == 0 {
			return
		}
		if time.Now().After(deadline) {
			h.t.Logf("drain: queues not empty after %s: %v", timeout, q)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitNoConsumer waits until RabbitMQ has processed the end of dlq's
// connection: no consumer left on dlq's queue. Anything dlq left
// unacknowledged is then back among the ready messages.
func (h *harness) waitNoConsumer() map[string]queueState {
	h.t.Helper()
	var q map[string]queueState
	dlqtest.Eventually(h.t, 30*time.Second, func() bool {
		q = h.liveCounts()
		return q[h.queue].Consumers == 0
	}, "a consumer is still attached to %s after dlq stopped: %v", h.queue, q)
	return q
}

// requireQueuesEmpty asserts that nothing of the test's is left in
// RabbitMQ, ready or unacknowledged, once dlq has stopped: live ready
// counts of 0 with no consumer attached, and rabbitmqctl's unacknowledged
// counts settling at 0 too.
func (h *harness) requireQueuesEmpty() {
	h.t.Helper()
	q := h.waitNoConsumer()
	for name, c := range q {
		require.Equal(h.t, 0, c.Ready, "queue %s still holds ready messages: %v", name, q)
	}
	var u map[string][2]int
	dlqtest.Eventually(h.t, 30*time.Second, func() bool {
		u = h.unackedCounts()
		for _, c := range u {
			if c != [2]int{} {
				return false
			}
		}
		return true
	}, "rabbitmqctl still lists messages [ready, unacked]: %v", u)
}

// stopGracefully sends SIGTERM and requires a clean exit.
func (h *harness) stopGracefully(p *proctest.Proc) {
	h.t.Helper()
	code, took := p.Term(h.t, 60*time.Second)
	require.Equal(h.t, 0, code, "dlq exit code after SIGTERM")
	h.t.Logf("dlq (start %d) stopped gracefully in %s", p.N, took.Round(time.Millisecond))
}

// bound reports whether dlq's queue is bound to the test's exchange with
// "#", as the broker lists its bindings (re-binding to find out would
// create the binding being looked for).
func (h *harness) bound() bool {
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := dlqtest.Rabbitmqctl(ctx, "list_bindings", "-q", "--no-table-headers",
		"source_name", "destination_name", "routing_key").Output()
	if err != nil {
		return false
	}
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if f := strings.Split(sc.Text(), "\t"); len(f) == 3 && f[0] == h.exchange && f[1] == h.queue && f[2] == "#" {
			return true
		}
	}
	return false
}

// explainDuplicates logs, for a few ids stored more than once, how each
// row came to be (proctest.ExplainDuplicates).
func (h *harness) explainDuplicates(limit int) {
	h.t.Helper()
	h.query(func(ctx context.Context) error {
		s, err := proctest.ExplainDuplicates(ctx, h.db, limit)
		if err == nil {
			h.t.Logf("duplicated ids (first %d):\n%s", limit, s)
		}
		return err
	})
}
