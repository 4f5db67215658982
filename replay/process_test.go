package replay_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// The tests in this file run the real binary: `dlq serve` processes that
// can be killed, and the CLI.

var (
	buildOnce sync.Once
	binPath   string
	binErr    error
	binDir    string
)

// dlqBinary returns the dlq binary: DLQ_TEST_DLQ_BIN when set (make test
// builds bin/dlq once for every package), else cmd/dlq built once per test
// run.
func dlqBinary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if bin := os.Getenv("DLQ_TEST_DLQ_BIN"); bin != "" {
			binPath = bin
			if _, err := os.Stat(bin); err != nil {
				binErr = fmt.Errorf("DLQ_TEST_DLQ_BIN: %w", err)
			}
			return
		}
		binDir, binErr = os.MkdirTemp("", "dlq-replay-test-")
		if binErr != nil {
			return
		}
		binPath = filepath.Join(binDir, "dlq")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/dlq/dlq/cmd/dlq").CombinedOutput()
		if err != nil {
			binErr = fmt.Errorf("go build: %w\n%s", err, out)
		}
	})
	require.NoError(t, binErr)
	return binPath
}

func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	return ln.Addr().String()
}

// proc is one `dlq serve` process.
type proc struct {
	cmd *exec.Cmd
	log string
	out *os.File
}

// env is the environment of dlq processes for this bundle.
func (b *bundle) env(t *testing.T, ctlQueue string, extra ...string) []string {
	env := append(os.Environ(),
		"DLQ_DATABASE_URL="+b.dsn,
		"DLQ_AMQP_URL="+dlqtest.AMQPURL(),
		"DLQ_EXCHANGE="+b.exchange,
		"DLQ_QUEUES="+b.queue,
		"DLQ_CONTROL_QUEUE="+ctlQueue,
		"DLQ_ADMIN_TOKEN="+adminToken,
		"DLQ_LOG_FORMAT=text",
	)
	return append(env, extra...)
}

// serve starts a dlq serve process; it is killed when the test ends.
func (b *bundle) serve(t *testing.T, ctlQueue string, extra ...string) *proc {
	t.Helper()
	cmd := exec.Command(dlqBinary(t), "serve")
	cmd.Env = b.env(t, ctlQueue, append([]string{"DLQ_HTTP_ADDR=" + freeAddr(t)}, extra...)...)
	logPath := filepath.Join(t.TempDir(), fmt.Sprintf("serve-%d.log", time.Now().UnixNano()))
	f, err := os.Create(logPath)
	require.NoError(t, err)
	cmd.Stdout, cmd.Stderr = f, f
	require.NoError(t, cmd.Start())
	p := &proc{cmd: cmd, log: logPath, out: f}
	t.Cleanup(func() {
		p.kill()
		if t.Failed() {
			if b, err := os.ReadFile(logPath); err == nil {
				t.Logf("dlq serve log (%s):\n%s", logPath, tail(string(b), 4000))
			}
		}
	})
	return p
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// kill sends SIGKILL: no shutdown of any kind.
func (p *proc) kill() {
	if p.cmd.ProcessState == nil {
		_ = p.cmd.Process.Signal(syscall.SIGKILL)
		_ = p.cmd.Wait()
		_ = p.out.Close()
	}
}

// stop sends SIGTERM and waits for the clean shutdown.
func (p *proc) stop(t *testing.T) {
	t.Helper()
	require.NoError(t, p.cmd.Process.Signal(syscall.SIGTERM))
	done := make(chan error, 1)
	go func() { done <- p.cmd.Wait() }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(60 * time.Second):
		t.Fatal("dlq serve did not stop within 60s of SIGTERM")
	}
	_ = p.out.Close()
}

// waitAnswering waits until some dlq answers on the control queue.
func (b *bundle) waitAnswering(t *testing.T, ctlQueue string) *control.Client {
	t.Helper()
	c := b.client(t, ctlQueue, adminToken)
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		a, err := c.Call(ctx, control.Command{Command: control.CmdListReplays})
		return err == nil && a.OK
	}, "no dlq answers on %s", ctlQueue)
	return c
}

// cli runs a dlq subcommand and returns its exit code, stdout and stderr.
func (b *bundle) cli(t *testing.T, ctlQueue, token string, args ...string) (int, string, string) {
	t.Helper()
	cmd := exec.Command(dlqBinary(t), args...)
	cmd.Env = b.env(t, ctlQueue, "DLQ_TOKEN="+token)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	code := 0
	if ee, ok := err.(*exec.ExitError); ok {
		code = ee.ExitCode()
	} else {
		require.NoError(t, err)
	}
	return code, stdout.String(), stderr.String()
}

// countAtTarget reads every message in queue and returns how many arrived
// per x-dlq-id.
func (b *bundle) countAtTarget(t *testing.T, queue string) map[int64]int {
	t.Helper()
	n := dlqtest.QueueDepth(t, b.app, queue)
	got := b.consume(t, queue, n, 60*time.Second)
	per := map[int64]int{}
	for _, d := range got {
		per[d.Headers[broker.HeaderID].(int64)]++
	}
	return per
}

// Two dlq processes replay the same 10,000 messages at the same time (two
// tasks over the same rows, one per process): each message arrives at the
// target exactly once.
func TestReplayTwoProcessesSameRows(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	const n = 10_000
	b.seed(t, q, n)
	ctlQueue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, ctlQueue)
	env := []string{"DLQ_REPLAY_MAX_TASKS=1", "DLQ_REPLAY_LEASE=5s"}
	b.serve(t, ctlQueue, env...)
	b.serve(t, ctlQueue, env...)
	c := b.waitAnswering(t, ctlQueue)
	// Both instances are up once two distinct consumers hold the queue.
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		ch, err := b.app.Channel()
		if err != nil {
			return false
		}
		defer ch.Close()
		qi, err := ch.QueueDeclarePassive(ctlQueue, true, false, false, false, nil)
		return err == nil && qi.Consumers >= 2
	}, "both dlq processes consuming the control queue")

	var tasks []replay.Task
	for i := 0; i < 2; i++ {
		a := call(t, c, fmt.Sprintf(`{"command":"replay","command_id":"two-%d","filter":{"source_queue":%q,"status":"all"},"confirm":true}`, i, q))
		tasks = append(tasks, taskOf(t, a))
	}
	var published int64
	for _, task := range tasks {
		final := b.waitTask(t, task.ID, 120*time.Second, replay.StatusCompleted)
		require.Equal(t, int64(n), final.Published+final.Skipped, "every item settled")
		t.Logf("task %d: published %d, skipped %d (replayed by the other)", final.ID, final.Published, final.Skipped)
		published += final.Published
	}
	require.Equal(t, int64(n), published)
	per := b.countAtTarget(t, q)
	require.Len(t, per, n)
	for id, k := range per {
		require.Equal(t, 1, k, "message %d arrived %d times", id, k)
	}
	require.Equal(t, n, b.count(t, "status = 'replayed' AND replay_count = 1"))
	b.requireSummaryExact(t)
}

// The CLI drives replays through the control queue: replay with a filter,
// wait with progress, list, show, cancel; errors map to exit codes.
func TestReplayCLI(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 50)
	ctlQueue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, ctlQueue)
	p := b.serve(t, ctlQueue)
	b.waitAnswering(t, ctlQueue)

	code, out, errOut := b.cli(t, ctlQueue, adminToken, "replay", "--source-queue", q, "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "dry run: 50 messages match")

	code, out, errOut = b.cli(t, ctlQueue, adminToken, "replay", "--source-queue", q, "--limit", "40", "--rate", "200", "--wait", "--json",
		"--on-unknown", "hold")
	require.Equal(t, 0, code, errOut)
	var task replay.Task
	require.NoError(t, json.Unmarshal([]byte(out), &task), out)
	require.Equal(t, replay.StatusCompleted, task.Status)
	require.Equal(t, int64(40), task.Published)
	require.Equal(t, replay.OnUnknownHold, task.Request.OnUnknown)
	require.Contains(t, errOut, "40/40", "the progress bar reached the end")
	require.Contains(t, errOut, "unknown 0  republished 0", "the progress line counts what was sent again")
	require.Equal(t, 40, dlqtest.QueueDepth(t, b.app, q))

	code, out, errOut = b.cli(t, ctlQueue, adminToken, "replay", fmt.Sprint(ids[49]), "--delay", "1h")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "scheduled")

	code, out, errOut = b.cli(t, ctlQueue, adminToken, "replays")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "completed")
	require.Contains(t, out, "scheduled")
	require.Contains(t, out, "UNKNOWN  REPUBLISHED")

	code, out, _ = b.cli(t, ctlQueue, adminToken, "replays", fmt.Sprint(task.ID))
	require.Equal(t, 0, code)
	require.Regexp(t, `\npublished +40\n`, out)
	require.Regexp(t, `republished +0`, out)
	require.Regexp(t, `on unknown +hold`, out)

	code, out, errOut = b.cli(t, ctlQueue, adminToken, "cancel", fmt.Sprint(task.ID+1))
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "cancelled")

	for _, c := range []struct {
		token string
		args  []string
		code  int
	}{
		{adminToken, []string{"cancel", "999999"}, 4},
		{"wrong", []string{"replays"}, 5},
		{adminToken, []string{"replay"}, 2},
		{adminToken, []string{"replay", "--rate", "-1", "1"}, 2},
		{adminToken, []string{"replay", "12", "--source-queue", "x"}, 2},
		{adminToken, []string{"replay", "--on-unknown", "twice", "12"}, 2},
	} {
		code, _, errOut := b.cli(t, ctlQueue, c.token, c.args...)
		require.Equal(t, c.code, code, "%v: %s", c.args, errOut)
	}

	// A task shows why it skipped messages, says what to do, and exits 1:
	// it published nothing of what it selected.
	code, out, errOut = b.cli(t, ctlQueue, adminToken, "replay", fmt.Sprint(ids[0]), "--wait")
	require.Equal(t, 1, code, errOut)
	require.Regexp(t, `skipped +1 \(not_pending 1\)`, out, "already replayed by the first task")
	require.Contains(t, errOut, "already replayed or acknowledged")

	// A clean stop of dlq serve.
	p.stop(t)
	code, _, errOut = b.cli(t, ctlQueue, adminToken, "replays", "--timeout", "2s")
	require.Equal(t, 3, code, "no dlq answering: %s", errOut)
	require.True(t, strings.Contains(errOut, "no answer") || strings.Contains(errOut, "unreachable"), errOut)
}

// dlq replay selects a time range with --since and --until (a duration ago
// or an RFC 3339 time), asks for --confirm above the threshold, and with
// --command-id a repeated call (a retry after a timeout) starts nothing
// new: it shows the first answer.
func TestReplayCLITimeRangeAndCommandID(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 30)
	ctx := context.Background()
	_, err := b.db.Exec(ctx, `UPDATE dead_messages SET failed_at = now() - interval '3 hours' WHERE id = ANY($1)`, ids[:10])
	require.NoError(t, err)
	_, err = b.db.Exec(ctx, `UPDATE dead_messages SET failed_at = now() - interval '2 hours' WHERE id = ANY($1)`, ids[10:20])
	require.NoError(t, err)
	ctlQueue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, ctlQueue)
	b.serve(t, ctlQueue, "DLQ_API_CONFIRM_ABOVE=15")
	b.waitAnswering(t, ctlQueue)

	code, out, errOut := b.cli(t, ctlQueue, adminToken, "replay", "--source-queue", q, "--since", "150m", "--until", "90m", "--dry-run")
	require.Equal(t, 0, code, errOut)
	require.Contains(t, out, "dry run: 10 messages match")

	code, _, errOut = b.cli(t, ctlQueue, adminToken, "replay", "--source-queue", q, "--until", "90m", "--delay", "1h")
	require.Equal(t, 2, code, "20 messages, threshold 15: %s", errOut)
	require.Contains(t, errOut, "confirm_required")
	require.Contains(t, errOut, "--confirm")
	require.Zero(t, b.tableCount(t, "replay_tasks"))

	now := time.Now().UTC()
	since, until := now.Add(-150*time.Minute).Format(time.RFC3339), now.Add(-90*time.Minute).Format(time.RFC3339)
	args := []string{"replay", "--source-queue", q, "--since", since, "--until", until, "--command-id", "cli-range-1", "--json"}
	code, out, errOut = b.cli(t, ctlQueue, adminToken, append(args, "--wait")...)
	require.Equal(t, 0, code, errOut)
	var task replay.Task
	require.NoError(t, json.Unmarshal([]byte(out), &task), out)
	require.Equal(t, replay.StatusCompleted, task.Status)
	require.Equal(t, int64(10), task.Published)
	require.Equal(t, 10, b.count(t, "id = ANY($1) AND status = 'replayed'", ids[10:20]))
	require.Equal(t, 20, b.count(t, "source_queue = $1 AND status = 'pending'", q), "outside the range: untouched")

	code, out, errOut = b.cli(t, ctlQueue, adminToken, args...)
	require.Equal(t, 0, code, errOut)
	var again replay.Task
	require.NoError(t, json.Unmarshal([]byte(out), &again), out)
	require.Equal(t, task.ID, again.ID, "the same command_id answers with the first task")
	require.Equal(t, 1, b.tableCount(t, "replay_tasks"), "and starts no other")
	require.Equal(t, 10, dlqtest.QueueDepth(t, b.app, q), "nothing published twice")

	for _, bad := range [][]string{
		{"--since", "1h", "--until", "2h"},
		{"--until", "yesterday"},
		{"--since", "2026-13-01T00:00:00Z"},
	} {
		code, _, errOut := b.cli(t, ctlQueue, adminToken, append([]string{"replay", "--source-queue", q}, bad...)...)
		require.Equal(t, 2, code, "%v: %s", bad, errOut)
	}
}
