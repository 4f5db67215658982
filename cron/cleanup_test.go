package cron

import (
	"context"
	"encoding/json"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func remainingIDs(t testing.TB, db *pgxpool.Pool) []int64 {
	t.Helper()
	var out []int64
	for _, ids := range idsByStatus(t, db) {
		out = append(out, ids...)
	}
	slices.Sort(out)
	return out
}

func without(all []int64, drop ...[]int64) []int64 {
	gone := map[int64]bool{}
	for _, d := range drop {
		for _, id := range d {
			gone[id] = true
		}
	}
	var out []int64
	for _, id := range all {
		if !gone[id] {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out
}

// waitJob waits until job has at least n runs that did its work (finished,
// not skipped) and returns the last one. A skip is no run of the job: on a
// loaded machine a short schedule skips ticks while a run is still going,
// and the newest finished row would be that skip.
func waitJob(t testing.TB, st *store.Store, job string, n int) store.JobRun {
	t.Helper()
	var last store.JobRun
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		runs, err := st.JobRuns(ctxT(t), job, 100)
		require.NoError(t, err)
		done := 0
		for _, r := range runs {
			if r.Outcome != store.JobRunning && r.Outcome != store.JobSkipped {
				done++
				if done == 1 {
					last = r
				}
			}
		}
		return done >= n
	}, "job %s did not finish %d runs", job, n)
	return last
}

// TestRetentionDeletesExactlyTheEligible builds every kind of message —
// pending (old and new), replaying, replayed and acknowledged before and
// after the cutoff — and runs the cleanup job in small batches. Exactly the
// resolved messages past their retention go, each batch adjusting the
// summary and writing one audit row; nothing pending or replaying is
// touched. Expired bookkeeping records go too.
func TestRetentionDeletesExactlyTheEligible(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)

	pendingOld := ingest(t, st, db, "orders", 5, 10)
	_, err := db.Exec(ctx, `UPDATE dead_messages SET failed_at = now() - interval '400 days' WHERE id = ANY($1)`, pendingOld)
	require.NoError(t, err)
	pendingNew := ingest(t, st, db, "orders", 5, 10)
	replaying := ingest(t, st, db, "orders", 4, 10)
	replayIDs(t, st, replaying, "", true)
	replayedOld := ingest(t, st, db, "orders", 13, 20)
	replayIDs(t, st, replayedOld, store.OutcomePublished, false)
	backdate(t, db, replayedOld, 31*24*time.Hour)
	replayedNew := ingest(t, st, db, "billing", 6, 20)
	replayIDs(t, st, replayedNew, store.OutcomePublished, false)
	backdate(t, db, replayedNew, 29*24*time.Hour)
	ackedOld := ingest(t, st, db, "billing", 9, 30)
	ackIDs(t, st, ackedOld)
	backdate(t, db, ackedOld, 40*24*time.Hour)
	ackedNew := ingest(t, st, db, "billing", 3, 30)
	ackIDs(t, st, ackedNew)
	before := remainingIDs(t, db)

	// Bookkeeping past its time, and some that is not.
	_, err = db.Exec(ctx, `
INSERT INTO control_commands (command_id, command, principal, answer, reserved_until, created_at) VALUES
    ('old', 'ack', 'ops', '{}', now() - interval '2 days', now() - interval '2 days'),
    ('new', 'ack', 'ops', '{}', now(), now());
INSERT INTO job_runs (job, tick, instance, token, started_at, finished_at, outcome) VALUES
    ('summary', now() - interval '30 days', 'gone', 1, now() - interval '30 days', now() - interval '30 days', 'success'),
    ('summary', now() - interval '29 days', 'gone', 1, now() - interval '29 days', now() - interval '29 days', 'success');
INSERT INTO replay_tasks (status, request, created_at, finished_at) VALUES
    ('completed', '{}', now() - interval '60 days', now() - interval '60 days'),
    ('running', '{}', now() - interval '60 days', NULL);
INSERT INTO replay_task_items (task_id, message_id)
SELECT t.id, g FROM replay_tasks t, generate_series(1, 3) g WHERE t.created_at < now() - interval '59 days';`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	svc, err := New(Config{
		Store: st, Logger: testLogger(t), Registerer: reg, Instance: "solo",
		Schedules: Only(Schedules{Cleanup: "@every 200ms"}),
		Cleanup: cleanup.Config{
			BatchSize: 4, // 13 replayed and 9 acknowledged take several batches
			JobRunTTL: 7 * 24 * time.Hour,
		},
	})
	require.NoError(t, err)
	svc.Start()
	run := waitJob(t, st, JobCleanup, 1)
	require.NoError(t, svc.Stop(ctx))
	require.Equal(t, store.JobSuccess, run.Outcome, run.Error)

	require.Equal(t, without(before, replayedOld, ackedOld), remainingIDs(t, db))
	require.Equal(t, trueCounts(t, db), summaryCounts(t, db))
	require.Equal(t, 13.0, metricValue(t, reg, "dlq_cleanup_deleted_total", map[string]string{"status": "replayed"}))
	require.Equal(t, 9.0, metricValue(t, reg, "dlq_cleanup_deleted_total", map[string]string{"status": "acknowledged"}))
	// One audit row per batch: 4+4+4+1 replayed, 4+4+1 acknowledged.
	require.Equal(t, int64(7), countWhere(t, db, `SELECT count(*) FROM audit_log WHERE action = 'retention' AND actor = 'cleanup' AND via = 'cron'`))
	require.Equal(t, int64(22), countWhere(t, db, `SELECT coalesce(sum(count), 0)::bigint FROM audit_log WHERE action = 'retention'`))
	// The failure groups lost the deleted messages too.
	require.Equal(t, int64(len(pendingOld)+len(pendingNew)+len(replaying)+len(replayedNew)+len(ackedNew)),
		countWhere(t, db, `SELECT coalesce(sum(pending + replaying + replayed + acknowledged), 0)::bigint FROM failure_groups`))

	require.Equal(t, int64(1), countWhere(t, db, `SELECT count(*) FROM control_commands`))
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM replay_tasks WHERE status = 'completed' AND created_at < now() - interval '59 days'`))
	require.Equal(t, int64(1), countWhere(t, db, `SELECT count(*) FROM replay_tasks WHERE status = 'running'`))
	// A deleted task's items went with it (they have no foreign key); the
	// running task keeps its own.
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM replay_task_items i WHERE NOT EXISTS (SELECT 1 FROM replay_tasks t WHERE t.id = i.task_id)`))
	require.Equal(t, int64(3), countWhere(t, db, `SELECT count(*) FROM replay_task_items i JOIN replay_tasks t ON t.id = i.task_id
WHERE t.status = 'running' AND t.created_at < now() - interval '59 days'`))
	// The older run went; the newest run of a job is kept however old, so
	// its last outcome stays visible.
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM job_runs WHERE instance = 'gone' AND tick < now() - interval '29 days 12 hours'`))
	require.Equal(t, int64(1), countWhere(t, db, `SELECT count(*) FROM job_runs WHERE instance = 'gone'`))
}

// TestCapacityEvictsInOrder fills the store past max_messages and checks
// the documented order — oldest resolved first (by resolution time, across
// replayed and acknowledged), pending never unless allowed — with the
// metric, one audit row per batch, and the capacity alert when nothing more
// may go.
func TestCapacityEvictsInOrder(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	hook := newReceiver(t)

	pending := ingest(t, st, db, "orders", 6, 10)
	acked := ingest(t, st, db, "orders", 4, 10)
	ackIDs(t, st, acked)
	replayed := ingest(t, st, db, "billing", 4, 10)
	replayIDs(t, st, replayed, store.OutcomePublished, false)
	// Resolution times, interleaved across the two statuses: oldest first
	// is acked[0], replayed[0], acked[1], replayed[1], ...
	var order []int64
	for i := range 4 {
		for _, id := range []int64{acked[i], replayed[i]} {
			_, err := db.Exec(ctx, `
UPDATE dead_messages SET acknowledged_at = CASE WHEN status = 'acknowledged' THEN now() - $2 * interval '1 minute' END,
    replayed_at = CASE WHEN status = 'replayed' THEN now() - $2 * interval '1 minute' ELSE replayed_at END
WHERE id = $1`, id, 100-len(order))
			require.NoError(t, err)
			order = append(order, id)
		}
	}

	reg := prometheus.NewRegistry()
	newSvc := func(c cleanup.Capacity) *Service {
		alertRules := alertsRules(t, `
rules:
  - {name: capacity, kind: capacity, threshold: 90, severity: critical}
`)
		svc, err := New(Config{
			Store: st, Logger: testLogger(t), Registerer: reg, Instance: "solo",
			Schedules: Only(Schedules{Capacity: "@every 200ms", Alerts: "@every 200ms"}),
			Cleanup:   cleanup.Config{BatchSize: 2, Capacity: c},
			Alerts:    AlertsConfig{Rules: alertRules, Notifiers: webhookNotifiers(t, hook.URL)},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop(context.Background()) })
		return svc
	}

	// 14 stored, cap 9: five resolved go, oldest resolution first.
	svc := newSvc(cleanup.Capacity{MaxMessages: 9})
	svc.Start()
	waitJob(t, st, JobCapacity, 1)
	require.Equal(t, without(append(append([]int64{}, pending...), order...), order[:5]), remainingIDs(t, db))
	require.Equal(t, 5.0, metricValue(t, reg, "dlq_capacity_evicted_total", nil))
	require.Equal(t, int64(3), countWhere(t, db, `SELECT count(*) FROM audit_log WHERE action = 'evict'`), "batches of 2, 2, 1")
	require.Equal(t, int64(5), countWhere(t, db, `SELECT sum(count)::bigint FROM audit_log WHERE action = 'evict'`))
	require.Equal(t, trueCounts(t, db), summaryCounts(t, db))
	// At the cap the capacity alert fires: evictions are never silent.
	firing := hook.waitAlert(t, "capacity", "firing")
	require.GreaterOrEqual(t, firing.Value, 100.0, "evaluated at the cap or before the eviction")
	require.NoError(t, svc.Stop(ctx))

	// Cap 4: the three resolved left go, then it is stuck: pending may not
	// be evicted. The run fails, the pending messages stay.
	done := int(countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'capacity' AND outcome NOT IN ('running', 'skipped')`))
	svc = newSvc(cleanup.Capacity{MaxMessages: 4})
	svc.Start()
	run := waitJob(t, st, JobCapacity, done+1)
	require.NoError(t, svc.Stop(ctx))
	require.Equal(t, store.JobFailure, run.Outcome)
	require.Contains(t, run.Error, "over capacity and nothing may be evicted")
	require.Equal(t, pending, remainingIDs(t, db))
	require.Equal(t, 8.0, metricValue(t, reg, "dlq_capacity_evicted_total", nil))

	// Allowed now: pending go in arrival order until the cap holds.
	// Stopped only after a run finished: a Stop that cancels a batch
	// while its COMMIT is on the wire leaves the rows gone and the batch
	// uncounted (the reply never came), as the metric below would show.
	done = int(countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'capacity' AND outcome NOT IN ('running', 'skipped')`))
	svc = newSvc(cleanup.Capacity{MaxMessages: 4, AllowEvictPending: true})
	svc.Start()
	run = waitJob(t, st, JobCapacity, done+1)
	require.NoError(t, svc.Stop(ctx))
	require.Equal(t, store.JobSuccess, run.Outcome, run.Error)
	require.Equal(t, pending[2:], remainingIDs(t, db))
	require.Equal(t, 10.0, metricValue(t, reg, "dlq_capacity_evicted_total", nil))
	var detail []byte
	require.NoError(t, db.QueryRow(ctx, `SELECT detail FROM audit_log WHERE action = 'evict' ORDER BY id DESC LIMIT 1`).Scan(&detail))
	var d map[string]any
	require.NoError(t, json.Unmarshal(detail, &d))
	require.EqualValues(t, 4, d["max_messages"])
	require.Contains(t, d["by_status"], "pending")
	require.Equal(t, trueCounts(t, db), summaryCounts(t, db))
}
