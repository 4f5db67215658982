package recovery

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
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

// buildDLQ builds the dlq binary of this tree (or takes DLQ_TEST_DLQ_BIN),
// removed when the test ends.
func buildDLQ(t *testing.T) string {
	t.Helper()
	bin, cleanup, err := proctest.BuildDLQ()
	require.NoError(t, err)
	t.Cleanup(cleanup)
	return bin
}

// proc is one `dlq serve` process.
type proc struct {
	cmd    *exec.Cmd
	exited chan struct{}
}

// startDLQ starts `dlq serve --config config` with env, its output to log.
func startDLQ(t *testing.T, bin, config string, env []string, log *os.File) *proc {
	t.Helper()
	cmd := exec.Command(bin, "serve", "--config", config)
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = log, log
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		select {
		case <-p.exited:
		default:
			_ = cmd.Process.Signal(syscall.SIGTERM)
			select {
			case <-p.exited:
			case <-time.After(30 * time.Second):
				_ = cmd.Process.Kill()
				<-p.exited
			}
		}
	})
	return p
}

func (p *proc) kill9(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGKILL))
	<-p.exited
}

// TestPolicyKill9MidAttempt: dlq is killed with SIGKILL while a policy's
// attempt is being published; a second dlq process takes the attempt
// over. Nothing is lost: every message is delivered and marked replayed,
// the ones the dead process may have published (at or below its
// write-ahead marks) sent again by the second (on_unknown retry, the
// default), and none ends unknown. Only those arrive twice: every message
// delivered more than once has an unknown outcome counted on its item, and
// every copy of it carries the same (x-dlq-id, x-dlq-replay-count). The
// attempt is made once (one task, however many processes ran the job).
func TestPolicyKill9MidAttempt(t *testing.T) {
	t.Parallel()
	if testing.Short() {
		t.Skip("builds and kills dlq processes")
	}
	bin := buildDLQ(t)
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	exchange, queue, ctl := dlqtest.Name(t, "dlx"), dlqtest.Name(t, "dlq"), dlqtest.Name(t, "ctl")
	target := dlqtest.Name(t, "orders")
	_, err := ch.QueueDeclare(target, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, queue, ctl, target)
	dlqtest.DeleteExchanges(t, app, exchange)

	// 3,000 transient failures of the target queue, stored as dlq stores
	// them, that died a minute ago: the policy's first attempt is due.
	const n = 3000
	ago := time.Now().Add(-time.Minute)
	for done := 0; done < n; {
		b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "seed"}
		for i := done; i < min(n, done+500); i++ {
			b.Messages = append(b.Messages, store.NewMessage{
				SourceQueue: target, SourceRoutingKey: target, DeadLetterQueue: queue, Reason: "rejected", DeathCount: 1,
				FailureType: "System.TimeoutException", FailureMessage: "The operation has timed out.", Category: "transient",
				Properties: json.RawMessage(`{"delivery_mode":2}`), Headers: json.RawMessage(`{}`),
				Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), FirstFailedAt: ago, FailedAt: ago, Fingerprint: int64(i + 1),
			})
		}
		done += len(b.Messages)
		_, err := st.IngestBatch(context.Background(), b)
		require.NoError(t, err)
	}

	config := filepath.Join(t.TempDir(), "dlq.yaml")
	require.NoError(t, os.WriteFile(config, []byte(fmt.Sprintf(`
recovery:
  policies:
    - name: kill-test
      queues: [%s]
      first_delay: 1s
      max_attempts: 1
      rate_per_second: 400
`, target)), 0o600))
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			env = append(env, kv)
		}
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	env = append(env, "DLQ_DATABASE_URL="+dsn, "DLQ_AMQP_URL="+dlqtest.AMQPURL(), "DLQ_EXCHANGE="+exchange, "DLQ_QUEUES="+queue,
		"DLQ_CONTROL_QUEUE="+ctl, "DLQ_HTTP_ADDR="+addr, "DLQ_UI=false", "DLQ_CRON_POLICIES=@every 200ms",
		"DLQ_CRON_SUMMARY=off", "DLQ_CRON_CLEANUP=off", "DLQ_CRON_CAPACITY=off", "DLQ_CRON_ALERTS=off", "DLQ_CRON_CATEGORIES=off",
		"DLQ_CRON_LEASE_TTL=2s", "DLQ_REPLAY_LEASE=2s")
	logf, err := os.Create(filepath.Join(t.TempDir(), "dlq.log"))
	require.NoError(t, err)
	t.Cleanup(func() {
		if t.Failed() {
			b, _ := os.ReadFile(logf.Name())
			t.Logf("dlq's log:\n%s", b[max(0, len(b)-20000):])
		}
		_ = logf.Close()
	})
	first := startDLQ(t, bin, config, append(env, "DLQ_INSTANCE=first"), logf)

	// Kill it in the middle of the attempt.
	var task int64
	dlqtest.Eventually(t, 120*time.Second, func() bool {
		var published int64
		err := db.QueryRow(context.Background(), `SELECT id, published FROM replay_tasks WHERE created_by = 'policy:kill-test'`).
			Scan(&task, &published)
		return err == nil && published > 300
	}, "the policy's attempt never got going")
	first.kill9(t)
	var publishedAtKill int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT published FROM replay_tasks WHERE id = $1`, task).Scan(&publishedAtKill))
	require.Less(t, publishedAtKill, int64(n), "killed mid-attempt")

	startDLQ(t, bin, config, append(env, "DLQ_INSTANCE=second"), logf)
	var status string
	dlqtest.Eventually(t, 180*time.Second, func() bool {
		require.NoError(t, db.QueryRow(context.Background(), `SELECT status FROM replay_tasks WHERE id = $1`, task).Scan(&status))
		return store.TaskFinished(status)
	}, "the attempt was never finished after the kill")
	require.Equal(t, store.TaskCompleted, status)
	// Let the policies job run a few more times: still one attempt.
	runs := count(t, db, `SELECT count(*) FROM job_runs WHERE job = 'policies' AND outcome = 'success' AND instance = 'second'`)
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		return count(t, db, `SELECT count(*) FROM job_runs WHERE job = 'policies' AND outcome = 'success' AND instance = 'second'`) >= runs+5
	}, "the second instance does not run the policies job")
	require.Equal(t, int64(1), count(t, db, `SELECT count(*) FROM replay_tasks WHERE created_by = 'policy:kill-test'`), "one attempt")

	// What arrived: every copy in the target queue, by x-dlq-id, and the
	// replay counts they carried.
	got := map[int64]int{}
	counts := map[int64]map[int64]bool{}
	consumeAll(t, app, target, func(d amqp.Delivery) {
		id, ok := d.Headers[broker.HeaderID].(int64)
		require.True(t, ok, "a replayed message carries x-dlq-id: %v", d.Headers)
		got[id]++
		rc, _ := d.Headers[broker.HeaderReplayCount].(int64)
		if counts[id] == nil {
			counts[id] = map[int64]bool{}
		}
		counts[id][rc] = true
	})
	rows, err := db.Query(context.Background(), `
SELECT m.id, m.status, coalesce(m.last_replay_error, ''), coalesce(i.unknown_count, 0)
FROM dead_messages m JOIN replay_task_items i ON i.message_id = m.id AND i.task_id = $1`, task)
	require.NoError(t, err)
	var lost, dup, twice, replayed, inDoubt int
	for rows.Next() {
		var (
			id         int64
			status, le string
			unknowns   int
		)
		require.NoError(t, rows.Scan(&id, &status, &le, &unknowns))
		if unknowns > 0 {
			inDoubt++
		}
		switch {
		case status == store.StatusReplayed && got[id] > 0:
			replayed++
		default:
			lost++
			t.Errorf("message %d is %s (%q), arrived %d times: not delivered and replayed", id, status, le, got[id])
		}
		if got[id] > 1 {
			twice++
			if got[id] > 1+unknowns {
				dup++
				t.Errorf("message %d arrived %d times, but only %d of its publishes had an unknown outcome", id, got[id], unknowns)
			}
		}
		require.Len(t, counts[id], 1, "message %d: every copy carries the same x-dlq-replay-count", id)
	}
	require.NoError(t, rows.Err())
	require.Zero(t, lost)
	require.Zero(t, dup)
	require.Equal(t, n, replayed)
	var unknown, republished int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT unknown, republished FROM replay_tasks WHERE id = $1`, task).
		Scan(&unknown, &republished))
	require.Zero(t, unknown, "every unknown outcome was sent again")
	require.GreaterOrEqual(t, republished, int64(twice), "what arrived twice was sent again")
	t.Logf("published before the kill: %d; replayed: %d; in doubt after the kill and sent again: %d (republished %d); arrived twice: %d",
		publishedAtKill, replayed, inDoubt, republished, twice)
}

func count(t *testing.T, db *pgxpool.Pool, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// consumeAll reads queue until it stays empty for two seconds.
func consumeAll(t *testing.T, conn *amqp.Connection, queue string, fn func(amqp.Delivery)) {
	t.Helper()
	ch := dlqtest.Channel(t, conn)
	require.NoError(t, ch.Qos(500, 0, false))
	ds, err := ch.Consume(queue, "", false, false, false, false, nil)
	require.NoError(t, err)
	for {
		select {
		case d := <-ds:
			fn(d)
			require.NoError(t, d.Ack(false))
		case <-time.After(2 * time.Second):
			return
		}
	}
}
