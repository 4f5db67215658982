package ingest

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// dlqBin is the dlq binary under test, built once for the package.
var dlqBin string

func TestMain(m *testing.M) {
	// DLQ_TEST_DLQ_BIN runs the tests against a binary built elsewhere (a
	// race-enabled build, or a candidate fix) instead of this tree's.
	if bin := os.Getenv("DLQ_TEST_DLQ_BIN"); bin != "" {
		dlqBin = bin
		os.Exit(m.Run())
	}
	dir, err := os.MkdirTemp("", "dlq-ingest-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, "create build directory:", err)
		os.Exit(1)
	}
	dlqBin = filepath.Join(dir, "dlq")
	build := exec.Command("go", "build", "-o", dlqBin, "github.com/dlq/dlq/cmd/dlq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		fmt.Fprintln(os.Stderr, "build dlq:", err)
		_ = os.RemoveAll(dir)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(dir)
	os.Exit(code)
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
	ledger *ledger

	mu         sync.Mutex
	starts     int
	publishers int
	cur        *dlqProc
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
		httpAddr:    freeAddr(t),
		logPath:     filepath.Join(t.TempDir(), "dlq.log"),
		env:         map[string]string{},
		runID:       fmt.Sprintf("r%08x", rand.Uint32()),
		ledger:      newLedger(),
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

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
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
	for _, q := range []string{h.queue, h.control, h.ttlQueue, h.rejectQueue} {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
	if ch, err := conn.Channel(); err == nil {
		_ = ch.ExchangeDelete(h.exchange, false, false)
		_ = ch.Close()
	}
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

// processEnv is the environment of a dlq process: ours, without any DLQ_*
// setting inherited from whoever runs the tests.
func (h *harness) processEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			env = append(env, kv)
		}
	}
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
	for k, v := range vars {
		env = append(env, k+"="+v)
	}
	return env
}

// dlqProc is one `dlq serve` process.
type dlqProc struct {
	cmd     *exec.Cmd
	n       int
	exited  chan struct{}
	state   *os.ProcessState
	waitErr error
}

// start runs `dlq serve`; its output is appended to the test's log file.
func (h *harness) start() *dlqProc {
	h.t.Helper()
	return h.startArgs("serve")
}

// startArgs runs `dlq args...` as start does.
func (h *harness) startArgs(args ...string) *dlqProc {
	h.t.Helper()
	h.mu.Lock()
	defer h.mu.Unlock()
	require.True(h.t, h.cur == nil || h.cur.done(), "start: a dlq process is still running")
	h.starts++
	f, err := os.OpenFile(h.logPath, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	require.NoError(h.t, err)
	defer f.Close()
	fmt.Fprintf(f, "=== dlq start %d at %s\n", h.starts, time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(dlqBin, args...)
	cmd.Env = h.processEnv()
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(h.t, cmd.Start())
	p := &dlqProc{cmd: cmd, n: h.starts, exited: make(chan struct{})}
	go func() {
		p.waitErr = cmd.Wait()
		p.state = cmd.ProcessState
		close(p.exited)
	}()
	h.cur = p
	h.t.Cleanup(func() {
		if !p.done() {
			_ = cmd.Process.Kill()
			<-p.exited
		}
	})
	return p
}

func (p *dlqProc) done() bool {
	select {
	case <-p.exited:
		return true
	default:
		return false
	}
}

// kill9 kills the process without warning and waits until it is gone.
func (p *dlqProc) kill9(t *testing.T) {
	t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGKILL); err != nil && !p.done() {
		t.Fatalf("kill -9 dlq (start %d): %v", p.n, err)
	}
	<-p.exited
}

// term sends SIGTERM and waits up to timeout for the process to exit. It
// returns the exit code and how long the exit took.
func (p *dlqProc) term(t *testing.T, timeout time.Duration) (int, time.Duration) {
	t.Helper()
	start := time.Now()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-p.exited:
	case <-time.After(timeout):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Fatalf("dlq (start %d) did not exit within %s of SIGTERM", p.n, timeout)
	}
	return p.state.ExitCode(), time.Since(start)
}

// httpGet fetches path from the running dlq's HTTP server.
func (h *harness) httpGet(path string) (int, string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get("http://" + h.httpAddr + path)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// waitReady polls /readyz until it answers 200.
func (h *harness) waitReady(p *dlqProc, timeout time.Duration) {
	h.t.Helper()
	deadline := time.Now().Add(timeout)
	var last string
	for time.Now().Before(deadline) {
		if p.done() {
			h.t.Fatalf("dlq (start %d) exited while waiting for readiness: %v", p.n, p.waitErr)
		}
		code, body, err := h.httpGet("/readyz")
		if err == nil && code == http.StatusOK {
			return
		}
		last = fmt.Sprintf("status %d, body %s, error %v", code, body, err)
		time.Sleep(50 * time.Millisecond)
	}
	h.t.Fatalf("dlq (start %d) not ready after %s: %s", p.n, timeout, last)
}

// metric returns the value of one sample from /metrics, e.g.
// `dlq_up{component="postgres"}`.
func (h *harness) metric(sample string) (float64, error) {
	code, body, err := h.httpGet("/metrics")
	if err != nil {
		return 0, err
	}
	if code != http.StatusOK {
		return 0, fmt.Errorf("/metrics answered %d", code)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, sample+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("no sample %s in /metrics", sample)
}

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

// route is how a test message becomes a dead letter.
type route int

const (
	// viaTTL: published to a classic source queue with a message TTL of 0;
	// RabbitMQ expires and dead-letters it on arrival.
	viaTTL route = iota
	// viaReject: published to a quorum source queue; the test's rejecter
	// rejects it without requeue.
	viaReject
	// viaDirect: published straight to the dead-letter exchange with the
	// headers RabbitMQ would have written. Confirmed by dlq's quorum queue
	// itself, so it stays exact across broker restarts.
	viaDirect
)

// ledger records which ids the broker confirmed and which publishes are
// indeterminate (the channel died before a confirm, or a nack).
type ledger struct {
	mu            sync.Mutex
	confirmed     map[string]bool
	indeterminate map[string]bool
	nacks         int
}

func newLedger() *ledger {
	return &ledger{confirmed: map[string]bool{}, indeterminate: map[string]bool{}}
}

func (l *ledger) counts() (confirmed, indeterminate int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.confirmed), len(l.indeterminate)
}

// publisher dead-letters N uniquely identified messages, reconnecting
// whenever its connection dies. It never republishes an id: a publish
// whose fate is unknown stays indeterminate.
type publisher struct {
	h      *harness
	n      int
	routes []route
	// rate is messages per second overall; 0 is as fast as confirms allow.
	rate   int
	window int
	size   int
	prefix string
	// twins makes every message identical (twin), for the redelivery
	// matching's worst case: fingerprints shared by many rows.
	twins     bool
	twinDeath time.Time
	ledger    *ledger

	// confirmed and indeterminate count this publisher's own publishes.
	confirmed, indeterminate int

	done chan struct{}
	err  error
}

// publish starts publishing n dead letters at rate per second (0: as fast
// as confirms come back), cycling through routes, into the test's ledger.
func (h *harness) publish(ctx context.Context, n, rate int, routes ...route) *publisher {
	h.mu.Lock()
	h.publishers++
	prefix := fmt.Sprintf("%s.%d", h.runID, h.publishers)
	h.mu.Unlock()
	p := &publisher{h: h, n: n, routes: routes, rate: rate, window: 250, size: 256, prefix: prefix, ledger: h.ledger, done: make(chan struct{})}
	go func() {
		defer close(p.done)
		p.err = p.run(ctx)
	}()
	return p
}

func (p *publisher) wait(t *testing.T, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("publisher still running after %s", timeout)
	}
	require.NoError(t, p.err)
	p.ledger.mu.Lock()
	defer p.ledger.mu.Unlock()
	t.Logf("published %d (%s): confirmed %d, indeterminate %d", p.n, p.prefix, p.confirmed, p.indeterminate)
}

func (p *publisher) id(i int) string { return fmt.Sprintf("%s-%07d", p.prefix, i) }

// message builds dead letter i: its id leads the body, and most carry it as
// message-id too; one in ten has no message-id and is known by its body.
func (p *publisher) message(i int) (exchange, key string, m amqp.Publishing) {
	if p.twins {
		return p.h.exchange, "orders.created", amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			Body:         []byte(`{"order":"same","amount":1}`),
			Headers: amqp.Table{
				"x-death": []any{amqp.Table{
					"count": int64(1), "reason": "rejected", "queue": "orders.work",
					"exchange": "orders", "routing-keys": []any{"orders.created"}, "time": p.twinDeath,
				}},
				"x-first-death-reason": "rejected", "x-first-death-queue": "orders.work", "x-first-death-exchange": "orders",
			},
		}
	}
	id := p.id(i)
	body := make([]byte, 0, p.size)
	body = append(body, id...)
	body = append(body, '|')
	for len(body) < p.size {
		body = append(body, byte('a'+(i+len(body))%26))
	}
	m = amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  "application/octet-stream",
		Body:         body,
		Headers:      amqp.Table{"x-test-seq": int64(i), "tenant": "acme", "attempt": int32(i % 5)},
	}
	if i%10 != 3 {
		m.MessageId = id
	}
	switch p.routes[i%len(p.routes)] {
	case viaTTL:
		return "", p.h.ttlQueue, m
	case viaReject:
		return "", p.h.rejectQueue, m
	default:
		now := time.Now().UTC().Truncate(time.Second)
		m.Headers["x-death"] = []any{amqp.Table{
			"count": int64(1 + i%3), "reason": "rejected", "queue": "orders.work",
			"exchange": "orders", "routing-keys": []any{"orders.created"}, "time": now,
		}}
		m.Headers["x-first-death-reason"] = "rejected"
		m.Headers["x-first-death-queue"] = "orders.work"
		m.Headers["x-first-death-exchange"] = "orders"
		m.Headers["x-exception-message"] = "order " + id + " failed validation"
		return p.h.exchange, "orders.created", m
	}
}

func (p *publisher) run(ctx context.Context) error {
	start := time.Now()
	i := 0
	backoff := 100 * time.Millisecond
	for i < p.n {
		if ctx.Err() != nil {
			return nil
		}
		conn, err := amqp.Dial(dlqtest.AMQPURL())
		if err != nil {
			time.Sleep(backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		i = p.session(ctx, conn, i, start)
		_ = conn.Close()
	}
	return nil
}

// session publishes from message i on one connection until it dies or all
// are published; it returns the next message to publish.
func (p *publisher) session(ctx context.Context, conn *amqp.Connection, i int, start time.Time) int {
	ch, err := conn.Channel()
	if err != nil {
		return i
	}
	if err := ch.Confirm(false); err != nil {
		return i
	}
	for i < p.n {
		k := min(p.window, p.n-i)
		type inflight struct {
			id string
			dc *amqp.DeferredConfirmation
		}
		batch := make([]inflight, 0, k)
		broken := false
		for j := 0; j < k; j++ {
			if p.rate > 0 {
				// Pace the publishes so dead letters keep arriving for
				// the whole test instead of in one burst.
				due := start.Add(time.Duration(i) * time.Second / time.Duration(p.rate))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
			}
			ex, key, m := p.message(i)
			id := p.id(i)
			i++
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, ex, key, false, false, m)
			if err != nil {
				// It may or may not have left our socket.
				p.ledger.mu.Lock()
				p.ledger.indeterminate[id] = true
				p.indeterminate++
				p.ledger.mu.Unlock()
				broken = true
				break
			}
			batch = append(batch, inflight{id, dc})
		}
		for _, f := range batch {
			ok, err := f.dc.WaitContext(ctx)
			p.ledger.mu.Lock()
			if err == nil && ok {
				p.ledger.confirmed[f.id] = true
				p.confirmed++
			} else {
				// Closed channel or nack: the message may still be routed.
				p.ledger.indeterminate[f.id] = true
				p.indeterminate++
				if err == nil && !ch.IsClosed() {
					p.ledger.nacks++
				}
				broken = broken || ch.IsClosed()
			}
			p.ledger.mu.Unlock()
		}
		if broken || ctx.Err() != nil {
			return i
		}
	}
	return i
}

// rejecter dead-letters everything in the reject source queue by rejecting
// it, reconnecting whenever its connection dies, until ctx ends.
func (h *harness) rejecter(ctx context.Context) {
	go func() {
		for ctx.Err() == nil {
			conn, err := amqp.Dial(dlqtest.AMQPURL())
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			func() {
				defer conn.Close()
				ch, err := conn.Channel()
				if err != nil {
					return
				}
				if err := ch.Qos(300, 0, false); err != nil {
					return
				}
				ds, err := ch.Consume(h.rejectQueue, "", false, false, false, false, nil)
				if err != nil {
					return
				}
				for {
					select {
					case <-ctx.Done():
						return
					case d, ok := <-ds:
						if !ok {
							return
						}
						_ = d.Reject(false)
					}
				}
			}()
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// ---------------------------------------------------------------------------
// Checking

// tally is the checker's verdict.
type tally struct {
	Confirmed, Indeterminate   int
	Rows                       int
	Lost, Duplicated           int
	Unexpected                 int
	IndeterminateStored        int
	ConversionErrors, BadIDRow int
	Nacks                      int
}

func (c tally) String() string {
	return fmt.Sprintf("confirmed=%d indeterminate=%d (stored %d, nacks %d) rows=%d lost=%d duplicated=%d unexpected=%d conversion_errors=%d message_id_mismatch=%d",
		c.Confirmed, c.Indeterminate, c.IndeterminateStored, c.Nacks, c.Rows, c.Lost, c.Duplicated, c.Unexpected, c.ConversionErrors, c.BadIDRow)
}

// query retries fn while PostgreSQL is unreachable (fault tests restart it).
func (h *harness) query(fn func(ctx context.Context) error) {
	h.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			require.NoError(h.t, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (h *harness) rowCount() int {
	h.t.Helper()
	var n int
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&n)
	})
	return n
}

func (h *harness) inflightCount() int {
	h.t.Helper()
	var n int
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(*) FROM ingest_inflight`).Scan(&n)
	})
	return n
}

// check reads every stored row back and counts against the ledger.
func (h *harness) check() tally {
	h.t.Helper()
	l := h.ledger
	seen := map[string]int{}
	var c tally
	h.query(func(ctx context.Context) error {
		seen = map[string]int{}
		c = tally{}
		rows, err := h.db.Query(ctx, `SELECT message_id, substring(body FROM 1 FOR 64), conversion_error IS NOT NULL FROM dead_messages`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var mid *string
			var head []byte
			var convErr bool
			if err := rows.Scan(&mid, &head, &convErr); err != nil {
				return err
			}
			c.Rows++
			if convErr {
				c.ConversionErrors++
			}
			id, _, _ := bytes.Cut(head, []byte("|"))
			if mid != nil && *mid != string(id) {
				c.BadIDRow++
			}
			seen[string(id)]++
		}
		return rows.Err()
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	c.Confirmed, c.Indeterminate, c.Nacks = len(l.confirmed), len(l.indeterminate), l.nacks
	for id := range l.confirmed {
		if seen[id] == 0 {
			c.Lost++
		}
	}
	for id, n := range seen {
		if n > 1 {
			c.Duplicated++
		}
		switch {
		case l.confirmed[id]:
		case l.indeterminate[id]:
			c.IndeterminateStored++
		default:
			c.Unexpected++
		}
	}
	return c
}

func (h *harness) requireExact(c tally) {
	h.t.Helper()
	h.t.Logf("checker: %s", c)
	if c.Duplicated > 0 {
		h.explainDuplicates(10)
	}
	require.Zero(h.t, c.Lost, "lost: %s", c)
	require.Zero(h.t, c.Duplicated, "duplicated: %s", c)
	require.Zero(h.t, c.Unexpected, "unexpected: %s", c)
	require.Zero(h.t, c.BadIDRow, "rows whose message_id disagrees with their body: %s", c)
	require.Zero(h.t, c.ConversionErrors, "rows stored raw: %s", c)
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
	confirmed, _ := h.ledger.counts()
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
func (h *harness) stopGracefully(p *dlqProc) {
	h.t.Helper()
	code, took := p.term(h.t, 60*time.Second)
	require.Equal(h.t, 0, code, "dlq exit code after SIGTERM")
	h.t.Logf("dlq (start %d) stopped gracefully in %s", p.n, took.Round(time.Millisecond))
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

// explainDuplicates logs, for a few ids stored more than once, each row's
// ingest batch, when it was received and when its batch committed, and
// which consumer wrote it (ingest_inflight keeps batches whose
// acknowledgement was never confirmed): enough to tell a redelivery
// matched too early from one that found no candidate left.
func (h *harness) explainDuplicates(limit int) {
	h.t.Helper()
	h.query(func(ctx context.Context) error {
		rows, err := h.db.Query(ctx, `
WITH r AS (
    SELECT id, split_part(convert_from(substring(body FROM 1 FOR 64), 'UTF8'), '|', 1) AS key,
           ingest_batch, failed_at
    FROM dead_messages
), d AS (
    SELECT key FROM r GROUP BY key HAVING count(*) > 1 ORDER BY key LIMIT $1
)
SELECT r.key, r.id, coalesce(r.ingest_batch, 0), r.failed_at,
       coalesce(f.consumer, ''), f.committed_at
FROM r JOIN d USING (key) LEFT JOIN ingest_inflight f ON f.batch_id = r.ingest_batch
ORDER BY r.key, r.id`, limit)
		if err != nil {
			return err
		}
		defer rows.Close()
		var b strings.Builder
		for rows.Next() {
			var key, consumer string
			var id, batch int64
			var failedAt time.Time
			var committed *time.Time
			if err := rows.Scan(&key, &id, &batch, &failedAt, &consumer, &committed); err != nil {
				return err
			}
			c := "not in ingest_inflight"
			if committed != nil {
				c = "committed " + committed.Format("15:04:05.000000") + " by " + consumer
			}
			fmt.Fprintf(&b, "  %s row %d batch %d received %s, %s\n", key, id, batch, failedAt.Format("15:04:05.000000"), c)
		}
		h.t.Logf("duplicated ids (first %d):\n%s", limit, b.String())
		return rows.Err()
	})
}
