package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// idsByStatus returns every stored id by status.
func idsByStatus(t testing.TB, db *pgxpool.Pool) map[string][]int64 {
	t.Helper()
	rows, err := db.Query(ctxT(t), `SELECT id, status FROM dead_messages ORDER BY id`)
	require.NoError(t, err)
	out := map[string][]int64{}
	for rows.Next() {
		var id int64
		var s string
		require.NoError(t, rows.Scan(&id, &s))
		out[s] = append(out[s], id)
	}
	require.NoError(t, rows.Err())
	return out
}

func pick(r *rand.Rand, ids []int64, max int) []int64 {
	if len(ids) == 0 || max == 0 {
		return nil
	}
	n := 1 + r.IntN(min(len(ids), max))
	p := r.Perm(len(ids))[:n]
	out := make([]int64, n)
	for i, k := range p {
		out[i] = ids[k]
	}
	return out
}

// returnIDs makes replayed messages die again: each comes back through
// ingest to its own row (x-dlq-id), pending once more.
func returnIDs(t testing.TB, st *store.Store, db *pgxpool.Pool, ids []int64) {
	t.Helper()
	ctx := ctxT(t)
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for _, id := range ids {
		var queue string
		var body []byte
		var count int64
		require.NoError(t, db.QueryRow(ctx, `SELECT source_queue, body, replay_count FROM dead_messages WHERE id = $1`, id).
			Scan(&queue, &body, &count))
		now := time.Now()
		b.Messages = append(b.Messages, store.NewMessage{
			SourceQueue: queue, DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 2,
			Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: body,
			FirstFailedAt: now, FailedAt: now, Fingerprint: rand.Int64(),
			DLQID: id, ReplayID: fmt.Sprintf("r-%d-%d", id, rand.Int64()), ReplayCount: count,
		})
	}
	_, err := st.IngestBatch(ctx, b)
	require.NoError(t, err)
	require.NoError(t, st.ConfirmBatches(ctx, []int64{b.ID}))
}

// TestSummaryExactUnderRandomMix applies random mixes of every writer that
// exists (ingest, replay claim/settle, a replayed message dying again,
// acknowledge, delete, retention, eviction) over many seeds, and checks
// after each that queue_summary equals the true counts and that
// reconciliation finds nothing to repair.
func TestSummaryExactUnderRandomMix(t *testing.T) {
	t.Parallel()
	for seed := range uint64(6) {
		t.Run(fmt.Sprintf("seed_%d", seed), func(t *testing.T) {
			t.Parallel()
			st, dsn := dlqtest.Store(t)
			db := dlqtest.DB(t, dsn)
			r := rand.New(rand.NewPCG(seed, 42))
			queues := []string{"orders", "billing", "emails"}
			lease := dlqtest.Lease(t, st, "property")
			ctx := ctxT(t)
			var trail []string
			for step := range 30 {
				ids := idsByStatus(t, db)
				op := r.IntN(9)
				switch op {
				case 0, 1:
					q := queues[r.IntN(len(queues))]
					n := 1 + r.IntN(20)
					ingest(t, st, db, q, n, r.IntN(200))
					trail = append(trail, fmt.Sprintf("ingest %d into %s", n, q))
				case 2:
					sel := pick(r, ids[store.StatusPending], 10)
					replayIDs(t, st, sel, store.OutcomePublished, false)
					trail = append(trail, fmt.Sprintf("replay %d published", len(sel)))
				case 3:
					sel := pick(r, ids[store.StatusPending], 5)
					res := []string{store.OutcomeFailed, store.OutcomeUnknown, store.OutcomeReleased}[r.IntN(3)]
					leave := r.IntN(3) == 0
					replayIDs(t, st, sel, res, leave)
					trail = append(trail, fmt.Sprintf("replay %d %s leave=%t", len(sel), res, leave))
				case 4:
					sel := pick(r, ids[store.StatusReplayed], 5)
					returnIDs(t, st, db, sel)
					trail = append(trail, fmt.Sprintf("return %d", len(sel)))
				case 5:
					sel := pick(r, append(ids[store.StatusPending], ids[store.StatusReplayed]...), 10)
					ackIDs(t, st, sel)
					trail = append(trail, fmt.Sprintf("ack %d", len(sel)))
				case 6:
					sel := pick(r, append(ids[store.StatusPending], ids[store.StatusAcknowledged]...), 10)
					deleteIDs(t, st, sel)
					trail = append(trail, fmt.Sprintf("delete %d", len(sel)))
				case 7:
					sel := pick(r, append(ids[store.StatusReplayed], ids[store.StatusAcknowledged]...), 10)
					backdate(t, db, sel, 48*time.Hour)
					for _, s := range store.RetentionStatuses {
						res, err := st.DeleteResolvedBefore(ctx, lease, s, time.Now().Add(-24*time.Hour), 3)
						require.NoError(t, err)
						trail = append(trail, fmt.Sprintf("retention %s %d", s, res.Messages))
					}
				case 8:
					class := store.EvictResolved
					if r.IntN(3) == 0 {
						class = store.EvictPending
					}
					res, err := st.EvictOldest(ctx, lease, class, 1+r.IntN(5), nil)
					require.NoError(t, err)
					trail = append(trail, fmt.Sprintf("evict %s %d", class, res.Messages))
				}
				require.Equal(t, trueCounts(t, db), summaryCounts(t, db), "summary drifted after step %d; steps: %v", step, trail)
			}
			queuesNow, err := st.SourceQueues(ctx, nil)
			require.NoError(t, err)
			for _, q := range queuesNow {
				rep, err := st.ReconcileQueue(ctx, lease, q, 7)
				require.NoError(t, err)
				require.Zero(t, rep.Entries, "reconciliation found drift in %s: %v; steps: %v", q, rep.Deltas, trail)
			}
		})
	}
}

// TestReconcileWhileIngesting: reconciliation counts in a snapshot and
// applies differences as increments, so writers committing during the
// count must never look like drift, and nothing they write is lost.
func TestReconcileWhileIngesting(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	lease := dlqtest.Lease(t, st, "reconcile")
	ingest(t, st, db, "busy", 500, 10)
	stop := make(chan struct{})
	var wg sync.WaitGroup
	var writes atomic.Int64
	wg.Go(func() {
		for {
			select {
			case <-stop:
				return
			default:
			}
			ids := ingest(t, st, db, "busy", 20, 10)
			ackIDs(t, st, ids[:5])
			deleteIDs(t, st, ids[5:8])
			writes.Add(1)
		}
	})
	for range 15 {
		rep, err := st.ReconcileQueue(ctx, lease, "busy", 50) // small chunks: a long snapshot
		require.NoError(t, err)
		require.Zero(t, rep.Entries, "concurrent writes seen as drift: %v", rep.Deltas)
	}
	close(stop)
	wg.Wait()
	require.Positive(t, writes.Load())
	require.Equal(t, trueCounts(t, db), summaryCounts(t, db))
}

// TestSummaryDriftRepairedAndBootstrap runs the summary job through the
// service on a table whose summary is wrong in every way a hand or a bug
// could make it: counts off, a row missing, a row for nothing, and then the
// whole table emptied. Each is found, repaired and counted.
func TestSummaryDriftRepairedAndBootstrap(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	ingest(t, st, db, "a", 30, 5)
	ids := ingest(t, st, db, "b", 20, 7)
	ackIDs(t, st, ids[:4])
	truth := trueCounts(t, db)

	_, err := db.Exec(ctx, `
UPDATE queue_summary SET messages = messages + 7, bytes = bytes - 3 WHERE source_queue = 'a' AND status = 'pending';
DELETE FROM queue_summary WHERE source_queue = 'b' AND status = 'acknowledged';
INSERT INTO queue_summary (source_queue, status, messages, bytes) VALUES ('ghost', 'pending', 5, 50);`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	svc, err := New(Config{
		Store: st, Logger: testLogger(t), Registerer: reg, Instance: "solo",
		Schedules: Only(Schedules{Summary: "@every 200ms"}),
		// A budget this small makes every run stop after one queue, so the
		// pass crosses ticks through its saved cursor.
		Summary: SummaryConfig{ReconcileInterval: 300 * time.Millisecond, Chunk: 8, Budget: time.Nanosecond},
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })

	dlqtest.Eventually(t, 30*time.Second, func() bool {
		s, err := st.ReadSummaryState(ctx)
		require.NoError(t, err)
		return s.BootstrappedAt != nil
	}, "summary never bootstrapped")
	require.Equal(t, truth, summaryCounts(t, db), "the ghost row is zeroed, the others match")
	require.GreaterOrEqual(t, countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'summary'`), int64(3),
		"the bootstrap pass took one run per queue")
	// The counter moves once a run's repairs have committed, just after
	// what the test reads in the database: wait for it.
	repairsCounted(t, reg, 3)
	var repairs int64
	require.NoError(t, db.QueryRow(ctx, `SELECT repairs FROM summary_state`).Scan(&repairs))
	require.Equal(t, int64(3), repairs)

	// Someone empties the summary: the next run notices and rebuilds it.
	_, err = db.Exec(ctx, `DELETE FROM queue_summary`)
	require.NoError(t, err)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		got := summaryCounts(t, db)
		return len(got) == len(truth) && fmt.Sprint(got) == fmt.Sprint(truth)
	}, "summary not rebuilt after being emptied")
	repairsCounted(t, reg, 3+len(truth))

	// The gauges read the repaired summary.
	require.Equal(t, 16.0, metricValue(t, reg, "dlq_dead_messages", map[string]string{"source_queue": "b", "status": "pending"}))
	require.Equal(t, 4.0, metricValue(t, reg, "dlq_dead_messages", map[string]string{"source_queue": "b", "status": "acknowledged"}))
}

// repairsCounted waits until dlq_summary_repairs_total reads want.
func repairsCounted(t *testing.T, reg *prometheus.Registry, want int) {
	t.Helper()
	var got float64
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		got = metricValue(t, reg, "dlq_summary_repairs_total", nil)
		return got >= float64(want)
	}, "dlq_summary_repairs_total never reached the repairs made")
	require.Equal(t, float64(want), got, "dlq_summary_repairs_total")
}

// TestStatusAndGauges: QueueStatus and the scrape-time gauges agree with the
// data, including the age of the oldest pending message per queue.
func TestStatusAndGauges(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	old := ingest(t, st, db, "q1", 3, 10)
	_, err := db.Exec(ctx, `UPDATE dead_messages SET failed_at = now() - interval '2 hours' WHERE id = $1`, old[0])
	require.NoError(t, err)
	ids := ingest(t, st, db, "q2", 4, 100)
	ackIDs(t, st, ids[:4])

	rep, err := st.QueueStatus(ctx, nil)
	require.NoError(t, err)
	require.Len(t, rep.Queues, 2)
	require.Equal(t, "q1", rep.Queues[0].SourceQueue)
	require.Equal(t, store.StatusCount{Messages: 3, Bytes: 30}, rep.Queues[0].ByStatus[store.StatusPending])
	require.NotNil(t, rep.Queues[0].OldestPendingAt)
	require.InDelta(t, (2 * time.Hour).Seconds(), rep.At.Sub(*rep.Queues[0].OldestPendingAt).Seconds(), 60)
	require.Nil(t, rep.Queues[1].OldestPendingAt)
	require.Equal(t, int64(400), rep.Queues[1].Bytes)

	scoped, err := st.QueueStatus(ctx, []string{"q2"})
	require.NoError(t, err)
	require.Len(t, scoped.Queues, 1)

	reg := prometheus.NewRegistry()
	svc, err := New(Config{Store: st, Logger: quietLogger(), Registerer: reg, Disabled: true,
		Cleanup: cleanup.Config{Capacity: cleanup.Capacity{MaxMessages: 14}}})
	require.NoError(t, err)
	require.Equal(t, 3.0, metricValue(t, reg, "dlq_dead_messages", map[string]string{"source_queue": "q1", "status": "pending"}))
	require.Equal(t, 400.0, metricValue(t, reg, "dlq_dead_message_bytes", map[string]string{"source_queue": "q2", "status": "acknowledged"}))
	require.InDelta(t, 7200, metricValue(t, reg, "dlq_oldest_pending_age_seconds", map[string]string{"source_queue": "q1"}), 60)
	require.Equal(t, 0.0, metricValue(t, reg, "dlq_oldest_pending_age_seconds", map[string]string{"source_queue": "q2"}))
	require.Equal(t, 0.5, metricValue(t, reg, "dlq_capacity_used_ratio", nil))
	require.NoError(t, svc.Stop(ctx))
}

// localeStore opens a migrated store on a database of the test's own whose
// default collation is ICU's en-US, where "orders-eu" sorts before
// "Payments" (byte order, and Go's, puts it after). The test server's
// databases sort in C.UTF-8, which hides any disagreement between the two.
func localeStore(t *testing.T) (*store.Store, string) {
	t.Helper()
	ctx := ctxT(t)
	name := dlqtest.Name(t, "d")
	admin, err := pgx.Connect(ctx, dlqtest.DatabaseURLBase())
	require.NoError(t, err)
	defer admin.Close(ctx)
	_, err = admin.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+
		" TEMPLATE template0 LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8'")
	require.NoError(t, err, "create a database with an en-US collation (PostgreSQL 15 or later, built with ICU)")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		c, err := pgx.Connect(ctx, dlqtest.DatabaseURLBase())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(dlqtest.DatabaseURLBase())
	require.NoError(t, err)
	u.Path = "/" + name
	dsn := u.String()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	return st, dsn
}

// TestSummaryPassAcrossRunsInLocaleOrder: on a database whose collation is
// not byte order, a reconciliation pass spread over several runs (a budget
// that stops each run after one queue) still reaches every queue, among
// them one the database sorts after the saved cursor and bytes before it.
func TestSummaryPassAcrossRunsInLocaleOrder(t *testing.T) {
	t.Parallel()
	st, dsn := localeStore(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	var localeFirst bool
	require.NoError(t, db.QueryRow(ctx, `SELECT 'orders-eu' < 'Payments'`).Scan(&localeFirst))
	require.True(t, localeFirst, "the database sorts orders-eu first, unlike byte order")

	for _, q := range []string{"alpha", "orders-eu", "Payments"} {
		ingest(t, st, db, q, 3, 10)
	}
	all, err := st.SourceQueues(ctx, nil)
	require.NoError(t, err)
	require.Equal(t, []string{"Payments", "alpha", "orders-eu"}, all, "byte order, as Go compares")
	after := "alpha"
	rest, err := st.SourceQueues(ctx, &after)
	require.NoError(t, err)
	require.Equal(t, []string{"orders-eu"}, rest)

	truth := trueCounts(t, db)
	_, err = db.Exec(ctx, `UPDATE queue_summary SET messages = messages + 5 WHERE source_queue = 'Payments' AND status = 'pending'`)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	sj, err := newSummaryJob(st, reg, SummaryConfig{ReconcileInterval: time.Hour, Budget: time.Nanosecond, Chunk: 100})
	require.NoError(t, err)
	lease := dlqtest.Lease(t, st, JobSummary)
	var runs int
	for ; runs < 10; runs++ {
		_, err := sj.run(ctx, &Run{Job: JobSummary, Lease: lease, Logger: testLogger(t)})
		require.NoError(t, err)
		s, err := st.ReadSummaryState(ctx)
		require.NoError(t, err)
		if s.LastPassAt != nil {
			break
		}
	}
	require.Equal(t, 2, runs, "one run per queue: the pass crossed ticks through its cursor")
	require.Equal(t, truth, summaryCounts(t, db), "every queue was reconciled, Payments too")
	require.Equal(t, 1.0, metricValue(t, reg, "dlq_summary_repairs_total", nil))
}
