package ingest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
)

// Process-level tests of the dlq binary's one-shot commands and of how
// `dlq serve` starts: the binary is dlqBin (DLQ_TEST_DLQ_BIN, or built by
// TestMain).

// names is one isolated set of dlq's broker names.
type names struct{ exchange, queue, control string }

func newNames(t *testing.T) names {
	n := names{exchange: dlqtest.Name(t, "dlx"), queue: dlqtest.Name(t, "dlq"), control: dlqtest.Name(t, "ctl")}
	t.Cleanup(func() {
		conn, err := dialRetry(10 * time.Second)
		if err != nil {
			return
		}
		defer conn.Close()
		proctest.DeleteTopology(conn, []string{n.queue, n.control}, []string{n.exchange})
	})
	return n
}

func (n names) env(dsn string) map[string]string {
	return map[string]string{
		"DLQ_AMQP_URL": dlqtest.AMQPURL(), "DLQ_DATABASE_URL": dsn,
		"DLQ_EXCHANGE": n.exchange, "DLQ_QUEUES": n.queue, "DLQ_CONTROL_QUEUE": n.control,
	}
}

// runDLQ runs `dlq args...` to completion with env (and no other DLQ_*
// setting) and returns its exit code and output.
func runDLQ(t *testing.T, env map[string]string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, dlqBin, args...)
	cmd.Env = proctest.Environ(env)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	switch {
	case err == nil:
	case errors.As(err, &exit):
		code = exit.ExitCode()
	default:
		t.Fatalf("run dlq %v: %v", args, err)
	}
	return code, out.String(), errOut.String()
}

// declared reports whether RabbitMQ has the queue (passive declare on a
// channel of its own: a 404 closes it).
func declared(t *testing.T, conn *amqp.Connection, queue string) bool {
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	_, err = ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	return err == nil
}

func exchangeDeclared(t *testing.T, conn *amqp.Connection, exchange string) bool {
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	return ch.ExchangeDeclarePassive(exchange, "topic", true, false, false, false, nil) == nil
}

func writeConfig(t *testing.T, yaml string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(p, []byte(yaml), 0o600))
	return p
}

// TestTopologyCommandIsIdempotent: `dlq topology` declares dlq's exchange,
// queue and control queue and the configured source queue with its
// dead-letter arguments; run again, it changes nothing and succeeds.
func TestTopologyCommandIsIdempotent(t *testing.T) {
	t.Parallel()
	n := newNames(t)
	src := dlqtest.Name(t, "orders")
	conn := dlqtest.Dial(t)
	dlqtest.DeleteQueues(t, conn, src)
	cfg := writeConfig(t, fmt.Sprintf("topology:\n  source_queues:\n    - name: %s\n      delivery_limit: 5\n      message_ttl: 1m\n", src))
	env := n.env("postgres://unused@127.0.0.1:1/none")
	var outs []string
	for run := 1; run <= 2; run++ {
		code, stdout, stderr := runDLQ(t, env, "topology", "--config", cfg)
		require.Equal(t, 0, code, "run %d: stdout %s, stderr %s", run, stdout, stderr)
		require.Contains(t, stdout, fmt.Sprintf("declared source queue %q", src))
		outs = append(outs, stdout)
	}
	require.Equal(t, outs[0], outs[1], "the second run reports the same")
	require.True(t, exchangeDeclared(t, conn, n.exchange))
	for _, q := range []string{n.queue, n.control, src} {
		require.True(t, declared(t, conn, q), "queue %s declared", q)
	}
	// The source queue has exactly the dead-letter arguments: declaring it
	// with them is accepted, with a different one refused.
	ch := dlqtest.Channel(t, conn)
	_, err := ch.QueueDeclare(src, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": n.exchange, "x-delivery-limit": int64(5),
		"x-message-ttl": int64(60000), "x-dead-letter-strategy": "at-least-once", "x-overflow": "reject-publish",
	})
	require.NoError(t, err, "source queue declared with its dead-letter arguments")
	ch2 := dlqtest.Channel(t, conn)
	_, err = ch2.QueueDeclare(src, true, false, false, false, amqp.Table{"x-queue-type": "quorum", "x-dead-letter-exchange": "elsewhere"})
	require.Error(t, err, "a different dead-letter exchange would clash: the check above can fail")
}

// TestTopologyCommandRefusesInvalidGraph: a dead-letter chain is refused
// before anything is declared, with exit code 2 and an error naming both
// queues.
func TestTopologyCommandRefusesInvalidGraph(t *testing.T) {
	t.Parallel()
	n := newNames(t)
	a, b := dlqtest.Name(t, "orders"), dlqtest.Name(t, "orders_dead")
	cfg := writeConfig(t, fmt.Sprintf(`topology:
  source_queues:
    - {name: %s, dead_letter_exchange: "", dead_letter_routing_key: %s}
    - {name: %s}
`, a, b, b))
	code, stdout, stderr := runDLQ(t, n.env("postgres://unused@127.0.0.1:1/none"), "topology", "--config", cfg)
	require.Equal(t, 2, code, "stdout %s", stdout)
	require.Contains(t, stderr, fmt.Sprintf("%q dead-letters into %q", a, b))
	require.Contains(t, stderr, "chains are not allowed")
	conn := dlqtest.Dial(t)
	require.False(t, exchangeDeclared(t, conn, n.exchange), "nothing declared")
	require.False(t, declared(t, conn, a))
	require.False(t, declared(t, conn, b))
}

// TestTopologyCommandExplainsClash: a queue that exists with other
// arguments makes `dlq topology` exit 2 with RabbitMQ's reason and what to
// do about it.
func TestTopologyCommandExplainsClash(t *testing.T) {
	t.Parallel()
	n := newNames(t)
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	_, err := ch.QueueDeclare(n.queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.NoError(t, err)
	code, _, stderr := runDLQ(t, n.env("postgres://unused@127.0.0.1:1/none"), "topology")
	require.Equal(t, 2, code)
	require.Contains(t, stderr, fmt.Sprintf("declare dead-letter queue %q", n.queue))
	require.Contains(t, stderr, "inequivalent arg 'x-queue-type'")
	require.Contains(t, stderr, "Either delete it")
}

// TestMigrateThenServeNoMigrate: `dlq serve --no-migrate` leaves an empty
// schema empty; `dlq migrate` applies every migration and says so, and run
// again has nothing to do; `dlq serve --no-migrate` then serves on it.
func TestMigrateThenServeNoMigrate(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t)
	n := newNames(t)
	env := n.env(dsn)
	h := &harness{t: t, dsn: dsn, exchange: n.exchange, queue: n.queue, control: n.control,
		httpAddr: proctest.FreeAddr(t), logPath: filepath.Join(t.TempDir(), "dlq.log"), env: map[string]string{}}
	tables := func() int {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		conn, err := pgx.Connect(ctx, dsn)
		require.NoError(t, err)
		defer conn.Close(ctx)
		var k int
		require.NoError(t, conn.QueryRow(ctx, `SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&k))
		return k
	}

	p := h.startArgs("serve", "--no-migrate")
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		code, _, err := h.httpGet("/healthz")
		return (err == nil && code == http.StatusOK) || p.Done()
	}, "serve --no-migrate never answered /healthz")
	require.False(t, p.Done(), "serve --no-migrate exited: %v", p.Err())
	require.Zero(t, tables(), "--no-migrate created no table")
	code, _ := p.Term(t, 30*time.Second)
	require.Equal(t, 0, code)

	code, stdout, stderr := runDLQ(t, env, "migrate")
	require.Equal(t, 0, code, "stderr %s", stderr)
	require.Regexp(t, `^applied \d+ migrations: version 0 -> \d+\n$`, stdout)
	require.Positive(t, tables())
	code, again, stderr := runDLQ(t, env, "migrate")
	require.Equal(t, 0, code, "stderr %s", stderr)
	require.Regexp(t, `^schema is up to date \(version \d+\)\n$`, again)

	p = h.startArgs("serve", "--no-migrate")
	h.waitReady(p, 30*time.Second)
	// Ready means ingest runs, so the store was settled before: empty, it
	// needs no first summary or category pass.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	var bootstrapped, categorised bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT (SELECT bootstrapped_at IS NOT NULL AND last_pass_at IS NOT NULL FROM summary_state),
    (SELECT rules_hash IS NOT NULL FROM category_state)`).Scan(&bootstrapped, &categorised))
	require.True(t, bootstrapped, "serve on an empty store left the summary's first pass to do")
	require.True(t, categorised, "serve on an empty store left the categories' first pass to do")
	code, took := p.Term(t, 30*time.Second)
	require.Equal(t, 0, code)
	t.Logf("serve --no-migrate on the migrated schema stopped in %s", took.Round(time.Millisecond))
}

// TestServeExplainsClashAndKeepsRunning: when dlq's queue exists with
// other arguments, `dlq serve` logs RabbitMQ's reason and what to do,
// keeps running (no crash loop) and retries slowly.
func TestServeExplainsClashAndKeepsRunning(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	n := newNames(t)
	conn := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, conn)
	_, err := ch.QueueDeclare(n.queue, true, false, false, false, amqp.Table{"x-queue-type": "classic"})
	require.NoError(t, err)

	h := &harness{t: t, dsn: dsn, exchange: n.exchange, queue: n.queue, control: n.control,
		httpAddr: proctest.FreeAddr(t), logPath: filepath.Join(t.TempDir(), "dlq.log"), env: map[string]string{"DLQ_LOG_LEVEL": "info"}}
	p := h.start()
	var lines []string
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		lines = h.logLines("cannot declare topology")
		code, _, err := h.httpGet("/healthz")
		return (len(lines) > 0 && err == nil && code == http.StatusOK) || p.Done()
	}, "dlq never reported the clash and served HTTP: log %v", lines)
	require.False(t, p.Done(), "dlq exited over the clash: %v", p.Err())
	require.Contains(t, lines[0], n.queue)
	require.Contains(t, lines[0], "inequivalent arg 'x-queue-type'")
	require.Contains(t, lines[0], "Either delete it")
	require.Contains(t, lines[0], fmt.Sprintf(`"retry_in":%d`, 30*time.Second), "a refusal is retried slowly")
	// Still serving: the HTTP server answers, and the clash is not retried
	// in a tight loop.
	deadline := time.Now().Add(2 * time.Second)
	for time.Now().Before(deadline) {
		code, _, err := h.httpGet("/healthz")
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, code)
		require.False(t, p.Done(), "dlq exited: %v", p.Err())
		time.Sleep(200 * time.Millisecond) // sampling a steady state, not waiting for an effect
	}
	require.Len(t, h.logLines("cannot declare topology"), 1, "one attempt in the first seconds, the next after 30s")
	code, _ := p.Term(t, 30*time.Second)
	require.Equal(t, 0, code)
}

// TestVersionCommand: `dlq version` and `dlq --version` print the same
// stamped release, then the schema version the build expects.
func TestVersionCommand(t *testing.T) {
	t.Parallel()
	code, v1, _ := runDLQ(t, nil, "version")
	require.Equal(t, 0, code)
	require.Regexp(t, `^dlq \S.*\nschema \d+ \(\d{5}_\w+\.sql\)\ngo go1\S* \S+\n$`, v1)
	code, v2, _ := runDLQ(t, nil, "--version")
	require.Equal(t, 0, code)
	require.Equal(t, v1, v2)
}
