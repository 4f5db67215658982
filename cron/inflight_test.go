package cron

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// fakeIngest stands in for this process's consumers.
type fakeIngest struct {
	mu    sync.Mutex
	tags  []string
	since time.Time
}

func (f *fakeIngest) ConsumerTags() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tags
}

func (f *fakeIngest) WorkingSince() time.Time {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.since
}

func (f *fakeIngest) set(since time.Time) {
	f.mu.Lock()
	f.since = since
	f.mu.Unlock()
}

// TestCleanupExpiresStaleInflight runs the cleanup job over ingest_inflight
// rows of every kind. While this process's ingest has worked for less than
// the TTL nothing goes; once it has worked for longer, exactly the rows
// older than the TTL written by other processes' consumers go, and the
// process's own consumers' rows and recent rows stay.
func TestCleanupExpiresStaleInflight(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)

	own := []string{"dlq-me-1-dlq-0", "dlq-me-1-dlq-1"}
	ing := &fakeIngest{tags: own, since: time.Now().Add(-10 * time.Minute)}
	stale := []int64{
		dlqtest.InflightRow(t, st, db, "dlq-killed-9-dlq-0", 2*time.Hour),
		dlqtest.InflightRow(t, st, db, "dlq-killed-9-dlq-1", 26*time.Hour),
		dlqtest.InflightRow(t, st, db, "dlq-other-3-dlq-0", 61*time.Minute),
	}
	keep := []int64{
		dlqtest.InflightRow(t, st, db, own[0], 5*time.Hour),
		dlqtest.InflightRow(t, st, db, "dlq-killed-9-dlq-0", 50*time.Minute),
	}
	all := append(append([]int64{}, stale...), keep...)
	sorted := func(ids []int64) []int64 {
		out := slices.Clone(ids)
		slices.Sort(out)
		return out
	}

	newSvc := func() *Service {
		svc, err := New(Config{
			Store: st, Logger: testLogger(t), Registerer: prometheus.NewRegistry(), Instance: "solo",
			Schedules: Only(Schedules{Cleanup: "@every 200ms"}),
			Cleanup: cleanup.Config{
				BatchSize: 2, // three stale rows take two batches
				Ingest:    ing, IngestInflightTTL: time.Hour,
			},
		})
		require.NoError(t, err)
		t.Cleanup(func() { _ = svc.Stop(ctxT(t)) })
		return svc
	}

	// Working for 10 minutes only: whatever RabbitMQ returned may not have
	// been delivered yet, so nothing goes.
	svc := newSvc()
	svc.Start()
	run := waitJob(t, st, JobCleanup, 1)
	require.NoError(t, svc.Stop(ctx))
	require.Equal(t, store.JobSuccess, run.Outcome, run.Error)
	require.Equal(t, sorted(all), dlqtest.InflightIDs(t, db))

	// Working for two hours: the stale rows of other consumers go.
	ing.set(time.Now().Add(-2 * time.Hour))
	done := int(countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'cleanup' AND outcome NOT IN ('running', 'skipped')`))
	before := countWhere(t, db, `SELECT coalesce(max(id), 0) FROM job_runs`)
	svc = newSvc()
	svc.Start()
	waitJob(t, st, JobCleanup, done+1)
	require.NoError(t, svc.Stop(ctx))
	require.Equal(t, sorted(keep), dlqtest.InflightIDs(t, db))
	// Every 200 ms, more than one run may finish before the poll sees
	// the first, and only one of them found the stale rows: count what
	// all of this service's runs did. (A run that Stop cut short ends a
	// failure; the first to finish ran whole.)
	var first store.JobRun
	require.NoError(t, db.QueryRow(ctx, `SELECT outcome, coalesce(error, '') FROM job_runs
WHERE job = 'cleanup' AND id > $1 AND outcome NOT IN ('running', 'skipped') ORDER BY id LIMIT 1`, before).Scan(&first.Outcome, &first.Error))
	require.Equal(t, store.JobSuccess, first.Outcome, first.Error)
	require.GreaterOrEqual(t, countWhere(t, db, `SELECT coalesce(sum(rows_affected), 0) FROM job_runs WHERE job = 'cleanup' AND id > $1`, before), int64(len(stale)))

	// Not working now (a consumer lost its channel, or cannot write):
	// nothing goes, however old.
	old := dlqtest.InflightRow(t, st, db, "dlq-killed-10-dlq-0", 3*time.Hour)
	ing.set(time.Time{})
	done = int(countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'cleanup' AND outcome NOT IN ('running', 'skipped')`))
	svc = newSvc()
	svc.Start()
	waitJob(t, st, JobCleanup, done+1)
	require.NoError(t, svc.Stop(ctx))
	require.Equal(t, sorted(append(keep, old)), dlqtest.InflightIDs(t, db))
}
