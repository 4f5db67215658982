package cron

import (
	"bufio"
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

var (
	jobProcOnce sync.Once
	jobProcPath string
	jobProcErr  error
)

// jobProc builds cron/internal/testjobproc once per test binary.
func jobProc(t *testing.T) string {
	t.Helper()
	jobProcOnce.Do(func() {
		dir, err := os.MkdirTemp("", "testjobproc")
		if err != nil {
			jobProcErr = err
			return
		}
		jobProcPath = filepath.Join(dir, "testjobproc")
		out, err := exec.Command("go", "build", "-o", jobProcPath, "./internal/testjobproc").CombinedOutput()
		if err != nil {
			jobProcErr = &buildError{err, string(out)}
		}
	})
	require.NoError(t, jobProcErr)
	return jobProcPath
}

type buildError struct {
	err error
	out string
}

func (e *buildError) Error() string { return e.err.Error() + ": " + e.out }

// syncBuffer collects a subprocess's log for printing on failure.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// startJobProc starts the cleanup job as a separate process holding
// instance's name, and waits until it is scheduling.
func startJobProc(t *testing.T, dsn, instance string) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(jobProc(t), "-dsn", dsn, "-instance", instance, "-ttl", "1s", "-batch", "5", "-pause", "150ms")
	logs := &syncBuffer{}
	cmd.Stderr = logs
	stdout, err := cmd.StdoutPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGCONT)
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("%s log:\n%s", instance, logs.String())
		}
	})
	line, err := bufio.NewReader(stdout).ReadString('\n')
	require.NoError(t, err, "subprocess log:\n%s", logs.String())
	require.Equal(t, "ready\n", line)
	return cmd
}

// seedExpired stores n replayed messages resolved two hours ago: work for
// a cleanup job with a one-hour retention.
func seedExpired(t *testing.T, st *store.Store, db *pgxpool.Pool, n int) {
	t.Helper()
	for n > 0 {
		k := min(n, 100)
		ids := ingest(t, st, db, "orders", k, 10)
		replayIDs(t, st, ids, store.OutcomePublished, false)
		backdate(t, db, ids, 2*time.Hour)
		n -= k
	}
}

func auditCount(t *testing.T, db *pgxpool.Pool, holder string) int64 {
	return countWhere(t, db, `SELECT count(*) FROM audit_log WHERE action = 'retention' AND detail->>'holder' = $1`, holder)
}

func leaseOf(t *testing.T, st *store.Store, job string) store.JobLease {
	t.Helper()
	ls, err := st.JobLeases(ctxT(t))
	require.NoError(t, err)
	for _, l := range ls {
		if l.Job == job {
			return l
		}
	}
	return store.JobLease{}
}

func newCleanupService(t *testing.T, st *store.Store, instance string) *Service {
	t.Helper()
	svc, err := New(Config{
		Store: st, Logger: testLogger(t), Registerer: prometheus.NewRegistry(), Instance: instance, LeaseTTL: time.Second,
		Schedules: Only(Schedules{Cleanup: "@every 200ms"}),
		Cleanup: cleanup.Config{
			Retention: map[string]time.Duration{store.StatusReplayed: time.Hour},
			BatchSize: 5, Pause: 150 * time.Millisecond,
		},
	})
	require.NoError(t, err)
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	return svc
}

// TestFencingPausedHolder pauses (SIGSTOP) the process that holds the
// cleanup job in the middle of its work. Another instance takes the job
// once the lease runs out, and when the paused one resumes, none of its
// writes land: the database shows every one of its audited batches before
// the takeover, its run ends as lease lost (or failed, if PostgreSQL closed
// its idle session), and every message was deleted exactly once.
func TestFencingPausedHolder(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	const total = 300
	seedExpired(t, st, db, total)

	a := startJobProc(t, dsn, "A")
	dlqtest.Eventually(t, 30*time.Second, func() bool { return auditCount(t, db, "A") >= 3 }, "A did not start deleting")
	require.NoError(t, a.Process.Signal(syscall.SIGSTOP))
	aLease := leaseOf(t, st, JobCleanup)
	require.Equal(t, "A", aLease.Holder)

	stoppedAt := time.Now()
	b := newCleanupService(t, st, "B")
	b.Start()
	dlqtest.Eventually(t, 30*time.Second, func() bool { return leaseOf(t, st, JobCleanup).Holder == "B" }, "B never took the job")
	bLease := leaseOf(t, st, JobCleanup)
	require.Greater(t, bLease.Token, aLease.Token)
	// Lease TTL 1s, plus up to 5s for PostgreSQL to end A's session if A
	// was paused inside a transaction, plus a tick.
	require.Less(t, time.Since(stoppedAt), 8*time.Second, "takeover took too long")
	dlqtest.Eventually(t, 30*time.Second, func() bool { return auditCount(t, db, "B") >= 2 }, "B did not delete")
	aBatches := auditCount(t, db, "A")

	require.NoError(t, a.Process.Signal(syscall.SIGCONT))
	var outcome, errText string
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		err := db.QueryRow(ctxT(t), `
SELECT outcome, coalesce(error, '') FROM job_runs WHERE instance = 'A' AND token = $1 AND outcome <> 'skipped' ORDER BY id DESC LIMIT 1`, aLease.Token).
			Scan(&outcome, &errText)
		require.NoError(t, err)
		return outcome != store.JobRunning
	}, "A's run never ended after it resumed")
	require.Contains(t, []string{store.JobLeaseLost, store.JobFailure}, outcome)
	t.Logf("A's run ended %s: %s", outcome, errText)

	// Nothing A did landed after B took over.
	require.Equal(t, aBatches, auditCount(t, db, "A"), "A wrote after resuming")
	require.Zero(t, countWhere(t, db, `
SELECT count(*) FROM audit_log WHERE detail->>'holder' = 'A' AND at >= $1`, bLease.AcquiredAt))
	require.Zero(t, countWhere(t, db, `
SELECT count(*) FROM audit_log WHERE detail->>'holder' = 'A' AND (detail->>'token')::bigint <> $1`, aLease.Token))
	// A, resumed, cannot take the job back while B holds it.
	require.Equal(t, "B", leaseOf(t, st, JobCleanup).Holder)

	dlqtest.Eventually(t, 60*time.Second, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM dead_messages`) == 0
	}, "the job never finished")
	require.Equal(t, int64(total), countWhere(t, db, `SELECT sum(count)::bigint FROM audit_log WHERE action = 'retention'`),
		"every message deleted exactly once")
	require.Empty(t, summaryCounts(t, db))
}

// TestFencingKilledHolder kills (SIGKILL) the process that holds the job.
// Its open transaction dies with its connection, and an instance that was
// waiting all along runs the job at the first tick after the lease expires.
func TestFencingKilledHolder(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	const total = 200
	seedExpired(t, st, db, total)
	a := startJobProc(t, dsn, "A")
	dlqtest.Eventually(t, 30*time.Second, func() bool { return auditCount(t, db, "A") >= 2 }, "A did not start deleting")
	b := newCleanupService(t, st, "B")
	b.Start()
	require.Equal(t, "A", leaseOf(t, st, JobCleanup).Holder, "B took the job from a live holder")

	require.NoError(t, a.Process.Kill())
	_ = a.Wait()
	killedAt := time.Now()
	dlqtest.Eventually(t, 30*time.Second, func() bool { return leaseOf(t, st, JobCleanup).Holder == "B" }, "B never took the job")
	// TTL 1s + one 200ms tick, with slack for a loaded machine.
	require.Less(t, time.Since(killedAt), 3*time.Second)
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM dead_messages`) == 0
	}, "the job never finished")
	require.Equal(t, int64(total), countWhere(t, db, `SELECT sum(count)::bigint FROM audit_log WHERE action = 'retention'`))
	require.Empty(t, summaryCounts(t, db))
	// A's last run could not record its end; B's takeover closed it.
	var errText string
	require.NoError(t, db.QueryRow(ctxT(t),
		`SELECT error FROM job_runs WHERE instance = 'A' ORDER BY id DESC LIMIT 1`).Scan(&errText))
	require.Contains(t, errText, "abandoned")
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM job_runs WHERE instance = 'A' AND outcome = 'running'`))
}
