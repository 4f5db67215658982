//go:build cluster

package cluster

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
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
)

const adminToken = "cluster-test-admin-token"

// deployment is one isolated dlq deployment: its database (a schema of
// the shared test database, or a database on the test's own PostgreSQL),
// its broker names on its broker nodes, and several dlq instances.
type deployment struct {
	t *testing.T
	// dsn is dlq's database; db the checker's own pool on it.
	dsn string
	db  *pgxpool.Pool
	// urls are the broker's nodes, in the order dlq dials them.
	urls                     []string
	exchange, queue, control string
	ttlQueue, rejectQueue    string
	env                      map[string]string
	ledger                   *proctest.Ledger
	runID                    string
	instances                []*instance
	mu                       sync.Mutex
	publishers               int
}

// instance is one `dlq serve` of the deployment: its HTTP address and log
// stay the same across restarts.
type instance struct {
	n      int
	addr   string
	log    string
	starts int
	proc   *proctest.Proc
	// bin is the dlq binary it runs, dlqBin unless the test set another
	// (an earlier version's); env adds to or overrides its DLQ_* settings.
	bin string
	env map[string]string
}

// deployOpts are newDeployment's inputs.
type deployOpts struct {
	// dsn: dlq's database, migrated; default a fresh schema of the shared
	// test database.
	dsn string
	// urls: the broker's nodes; default the shared broker. Queues are
	// declared through the first, so a quorum queue's leader is there.
	urls      []string
	instances int
	env       map[string]string
}

func newDeployment(t *testing.T, o deployOpts) *deployment {
	t.Helper()
	if o.dsn == "" {
		_, o.dsn = dlqtest.Store(t)
	}
	if len(o.urls) == 0 {
		o.urls = []string{dlqtest.AMQPURL()}
	}
	d := &deployment{
		t: t, dsn: o.dsn, db: openPool(t, o.dsn), urls: o.urls,
		exchange:    dlqtest.Name(t, "dlx"),
		queue:       dlqtest.Name(t, "dlq"),
		control:     dlqtest.Name(t, "ctl"),
		ttlQueue:    dlqtest.Name(t, "src_ttl"),
		rejectQueue: dlqtest.Name(t, "src_rej"),
		env: map[string]string{
			"DLQ_ADMIN_TOKEN":          adminToken,
			"DLQ_REPLAY_POLL_INTERVAL": "100ms",
			// Three instances share the database's connections with
			// the other tests: one task each is enough here.
			"DLQ_REPLAY_MAX_TASKS": "1",
		},
		ledger: proctest.NewLedger(),
		runID:  fmt.Sprintf("r%08x", rand.Uint32()),
	}
	for k, v := range o.env {
		d.env[k] = v
	}
	logDir := t.TempDir()
	for i := range o.instances {
		d.instances = append(d.instances, &instance{n: i, addr: proctest.FreeAddr(t), log: filepath.Join(logDir, fmt.Sprintf("dlq-%d.log", i))})
	}
	// Cleanups run last-in first-out: the processes stop before their
	// queues go.
	t.Cleanup(d.cleanupBroker)
	t.Cleanup(d.keepLogs)
	d.declare()
	return d
}

// openPool opens the test's own pool on dsn (for the checker's SQL),
// closed when the test ends. It reconnects by itself across a failover:
// a multi-host dsn finds the promoted server.
func openPool(t *testing.T, dsn string) *pgxpool.Pool {
	t.Helper()
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return pool
}

// declare sets up the broker side before any dlq runs, so that no dead
// letter published by the test is dropped for want of a route.
func (d *deployment) declare() {
	d.t.Helper()
	conn, err := amqp.Dial(d.urls[0])
	require.NoError(d.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(d.t, err)
	version, _ := conn.Properties["version"].(string)
	require.NoError(d.t, ch.ExchangeDeclare(d.exchange, "topic", true, false, false, false, nil))
	_, err = ch.QueueDeclare(d.queue, true, false, false, false, broker.OwnQueueArgs(version))
	require.NoError(d.t, err)
	require.NoError(d.t, ch.QueueBind(d.queue, "#", d.exchange, false, nil))
	_, err = ch.QueueDeclare(d.ttlQueue, true, false, false, false, amqp.Table{
		"x-queue-type": "classic", "x-message-ttl": int32(0), "x-dead-letter-exchange": d.exchange,
	})
	require.NoError(d.t, err)
	_, err = ch.QueueDeclare(d.rejectQueue, true, false, false, false, amqp.Table{
		"x-queue-type": "quorum", "x-dead-letter-exchange": d.exchange,
	})
	require.NoError(d.t, err)
}

// dial connects to the first broker node that answers, within timeout.
func (d *deployment) dial(timeout time.Duration) (*amqp.Connection, error) {
	deadline := time.Now().Add(timeout)
	for {
		var err error
		for _, u := range d.urls {
			var conn *amqp.Connection
			if conn, err = amqp.Dial(u); err == nil {
				return conn, nil
			}
		}
		if time.Now().After(deadline) {
			return nil, err
		}
		time.Sleep(200 * time.Millisecond)
	}
}

func (d *deployment) cleanupBroker() {
	conn, err := d.dial(30 * time.Second)
	if err != nil {
		return
	}
	defer conn.Close()
	proctest.DeleteTopology(conn, []string{d.queue, d.control, d.ttlQueue, d.rejectQueue}, []string{d.exchange})
}

// keepLogs shows the end of every instance's output when the test failed,
// and keeps all of it in DLQ_TEST_KEEP_LOGS=dir when set.
func (d *deployment) keepLogs() {
	for _, in := range d.instances {
		b, err := os.ReadFile(in.log)
		if err != nil {
			continue
		}
		if d.t.Failed() {
			lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
			lines = lines[max(0, len(lines)-60):]
			d.t.Logf("dlq instance %d output (last %d lines):\n%s", in.n, len(lines), strings.Join(lines, "\n"))
		}
		if dir := os.Getenv("DLQ_TEST_KEEP_LOGS"); dir != "" {
			name := fmt.Sprintf("%s-%s-%d.log", d.runID, strings.ReplaceAll(d.t.Name(), "/", "_"), in.n)
			_ = os.WriteFile(filepath.Join(dir, name), b, 0o644)
		}
	}
}

// processEnv is the DLQ_* environment of instance in.
func (d *deployment) processEnv(in *instance) map[string]string {
	env := map[string]string{
		"DLQ_DATABASE_URL":  d.dsn,
		"DLQ_AMQP_URL":      strings.Join(d.urls, ","),
		"DLQ_EXCHANGE":      d.exchange,
		"DLQ_QUEUES":        d.queue,
		"DLQ_CONTROL_QUEUE": d.control,
		"DLQ_HTTP_ADDR":     in.addr,
		"DLQ_LOG_FORMAT":    "json",
		"DLQ_INSTANCE":      fmt.Sprintf("dlq-%d", in.n),
	}
	for k, v := range d.env {
		env[k] = v
	}
	for k, v := range in.env {
		env[k] = v
	}
	return env
}

// start starts instance i, which must not be running.
func (d *deployment) start(i int) *proctest.Proc {
	d.t.Helper()
	in := d.instances[i]
	require.True(d.t, in.proc == nil || in.proc.Done(), "instance %d is still running", i)
	in.starts++
	bin := dlqBin
	if in.bin != "" {
		bin = in.bin
	}
	in.proc = proctest.Start(d.t, proctest.Options{Bin: bin, Args: []string{"serve"}, Env: d.processEnv(in), Log: in.log, N: in.starts})
	return in.proc
}

// startAll starts every instance and waits until all are ready. The wait
// is long because `dlq serve` migrates first, under a lock that every
// schema of the shared test database shares (goose's session lock): other
// tests' migrations on this machine hold it for seconds at a time.
func (d *deployment) startAll() {
	d.t.Helper()
	for i := range d.instances {
		d.start(i)
	}
	for i := range d.instances {
		d.waitReady(i, 3*time.Minute)
	}
}

func (d *deployment) running(i int) bool {
	p := d.instances[i].proc
	return p != nil && !p.Done()
}

func (d *deployment) waitReady(i int, timeout time.Duration) {
	d.t.Helper()
	proctest.WaitReady(d.t, d.instances[i].proc, d.instances[i].addr, timeout)
}

// readyz returns instance i's /readyz status code and its body.
func (d *deployment) readyz(i int) (int, string) {
	code, body, err := proctest.Get(d.instances[i].addr, "/readyz")
	if err != nil {
		return 0, err.Error()
	}
	return code, body
}

// waitReadyz waits until every running instance answers /readyz with code.
func (d *deployment) waitReadyz(code int, timeout time.Duration) {
	d.t.Helper()
	eventually(d.t, timeout, func() (bool, string) {
		for i := range d.instances {
			if !d.running(i) {
				continue
			}
			if c, body := d.readyz(i); c != code {
				return false, fmt.Sprintf("instance %d answered /readyz %d, not %d: %s", i, c, code, body)
			}
		}
		return true, ""
	})
}

// eventually polls cond until it holds or timeout passes, then fails the
// test with what cond last said.
func eventually(t testing.TB, timeout time.Duration, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		ok, why := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func (d *deployment) kill9(i int) {
	d.t.Helper()
	d.instances[i].proc.Kill9(d.t)
}

// stop stops instance i with SIGTERM and requires a clean exit.
func (d *deployment) stop(i int) {
	d.t.Helper()
	p := d.instances[i].proc
	code, took := p.Term(d.t, 90*time.Second)
	require.Equal(d.t, 0, code, "instance %d exit code after SIGTERM", i)
	d.t.Logf("instance %d (start %d) stopped gracefully in %s", i, p.N, took.Round(time.Millisecond))
}

func (d *deployment) stopAll() {
	d.t.Helper()
	for i := range d.instances {
		if d.running(i) {
			d.stop(i)
		}
	}
}

// publish starts publishing n distinct dead letters at rate per second
// through the broker nodes urls (default the deployment's), cycling
// through routes, into the deployment's ledger.
func (d *deployment) publish(ctx context.Context, n, rate int, urls []string, routes ...proctest.Route) *proctest.Publisher {
	d.mu.Lock()
	d.publishers++
	prefix := fmt.Sprintf("%s.%d", d.runID, d.publishers)
	d.mu.Unlock()
	if len(urls) == 0 {
		urls = d.urls
	}
	p := &proctest.Publisher{
		URLs: urls, Exchange: d.exchange, TTLQueue: d.ttlQueue, RejectQueue: d.rejectQueue,
		N: n, Routes: routes, Rate: rate, Window: 250, Size: 256, Prefix: prefix, Ledger: d.ledger,
	}
	return p.Start(ctx)
}

func (d *deployment) rejecter(ctx context.Context) { proctest.Rejecter(ctx, d.urls[0], d.rejectQueue) }

// query retries fn while PostgreSQL is unreachable (the failover tests
// promote a standby under it).
func (d *deployment) query(fn func(ctx context.Context) error) {
	d.t.Helper()
	proctest.Retry(d.t, 90*time.Second, fn)
}

// count runs a count(*) over dead_messages WHERE cond.
func (d *deployment) count(cond string, args ...any) int {
	d.t.Helper()
	var n int
	d.query(func(ctx context.Context) error {
		return d.db.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE `+cond, args...).Scan(&n)
	})
	return n
}

func (d *deployment) rowCount() int { return d.count("true") }

func (d *deployment) check() proctest.Tally {
	d.t.Helper()
	var c proctest.Tally
	d.query(func(ctx context.Context) error {
		var err error
		c, err = proctest.Check(ctx, d.db, d.ledger)
		return err
	})
	return c
}

func (d *deployment) requireExact(c proctest.Tally) {
	d.t.Helper()
	proctest.RequireExact(d.t, c, func() {
		d.query(func(ctx context.Context) error {
			s, err := proctest.ExplainDuplicates(ctx, d.db, 10)
			if err == nil {
				d.t.Logf("duplicated ids (first 10):\n%s", s)
			}
			return err
		})
	})
}

// queueState is a passive declare's view of a queue.
type queueState struct{ Ready, Consumers int }

func (d *deployment) queueState(name string) queueState {
	d.t.Helper()
	conn, err := d.dial(60 * time.Second)
	require.NoError(d.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(d.t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	require.NoError(d.t, err, "inspect queue %s", name)
	return queueState{Ready: q.Messages, Consumers: q.Consumers}
}

// waitDrained waits until every confirmed dead letter has a row and dlq's
// queue holds nothing ready.
func (d *deployment) waitDrained(timeout time.Duration) {
	d.t.Helper()
	confirmed, _ := d.ledger.Counts()
	deadline := time.Now().Add(timeout)
	for {
		// The row count alone is not enough: rows of indeterminate
		// publishes count too, so it can reach the confirmed count while
		// the last confirmed ones are still in an instance's batch. When
		// the cheap conditions hold, the checker says whether every
		// confirmed id is stored.
		if d.rowCount() >= confirmed && d.queueState(d.queue).Ready == 0 && d.check().Lost == 0 {
			return
		}
		if time.Now().After(deadline) {
			d.t.Logf("drain: %d rows for %d confirmed dead letters, queue %+v, %s after %s", d.rowCount(), confirmed, d.queueState(d.queue), d.check(), timeout)
			return
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// waitDelivered waits until dlq's queue holds nothing ready: everything
// was delivered to an instance, which a graceful stop then commits and
// acknowledges. For runs that may lose rows, where waitDrained would wait
// for rows that never come.
func (d *deployment) waitDelivered(timeout time.Duration) {
	d.t.Helper()
	eventually(d.t, timeout, func() (bool, string) {
		s := d.queueState(d.queue)
		return s.Ready == 0, fmt.Sprintf("dlq's queue still holds %d ready", s.Ready)
	})
}

// requireQueuesEmpty asserts, once every instance has stopped, that
// nothing of the test's is left in RabbitMQ and no consumer is attached
// (what dlq left unacknowledged would be ready again).
func (d *deployment) requireQueuesEmpty() {
	d.t.Helper()
	for _, q := range []string{d.queue, d.ttlQueue, d.rejectQueue} {
		var s queueState
		eventually(d.t, 30*time.Second, func() (bool, string) {
			s = d.queueState(q)
			// The source queue's consumer is the test's rejecter.
			return s.Consumers == 0 || q == d.rejectQueue, fmt.Sprintf("a consumer is still attached to %s: %+v", q, s)
		})
		require.Zero(d.t, s.Ready, "queue %s still holds ready messages", q)
	}
}

// api sends a request with the admin token to instance i's HTTP API and
// decodes a 2xx JSON answer into out (when not nil).
func (d *deployment) api(i int, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+d.instances[i].addr+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+adminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s answered %d: %s", method, path, resp.StatusCode, b)
	}
	if out != nil {
		if err := json.Unmarshal(b, out); err != nil {
			return fmt.Errorf("decode %s %s answer %q: %w", method, path, b, err)
		}
	}
	return nil
}
