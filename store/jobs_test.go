package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func jobsCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	t.Cleanup(cancel)
	return ctx
}

// TestJobRunRetentionKeepsLastSuccess: a job that has been failing for
// longer than job_run_ttl keeps its last successful run (and its newest
// run), so its last success, and the metric read from it, stay.
func TestJobRunRetentionKeepsLastSuccess(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := jobsCtx(t)
	var lastOK time.Time
	require.NoError(t, db.QueryRow(ctx, `
WITH runs(age, outcome) AS (VALUES
    (interval '12 days', 'success'), (interval '10 days', 'success'),
    (interval '9 days', 'failure'), (interval '8 days', 'failure'), (interval '1 hour', 'failure')),
ins AS (
    INSERT INTO job_runs (job, tick, instance, token, started_at, finished_at, outcome, error)
    SELECT 'flaky', now() - age, 'gone', 1, now() - age, now() - age + interval '1 second', outcome,
           CASE WHEN outcome = 'failure' THEN 'boom' END
    FROM runs
    RETURNING finished_at, outcome, started_at)
SELECT finished_at FROM ins WHERE started_at > now() - interval '11 days' AND outcome = 'success'`).Scan(&lastOK))

	lease := dlqtest.Lease(t, st, "cleanup_"+t.Name())
	n, err := st.DeleteJobRunsBefore(ctx, lease, time.Now().Add(-7*24*time.Hour), 100)
	require.NoError(t, err)
	require.Equal(t, int64(3), n, "the older success and the two old failures")

	last, err := st.LastJobSuccesses(ctx, []string{"flaky"})
	require.NoError(t, err)
	require.Contains(t, last, "flaky", "the last success survived retention")
	require.WithinDuration(t, lastOK, last["flaky"], time.Millisecond)
	runs, err := st.JobRuns(ctx, "flaky", 10)
	require.NoError(t, err)
	require.Len(t, runs, 2)
	require.Equal(t, store.JobFailure, runs[0].Outcome, "the newest run is kept too")
	require.Equal(t, store.JobSuccess, runs[1].Outcome)

	// Cleaning again deletes nothing more.
	n, err = st.DeleteJobRunsBefore(ctx, lease, time.Now().Add(-7*24*time.Hour), 100)
	require.NoError(t, err)
	require.Zero(t, n)
}

// TestSameHolderClosesItsAbandonedRun: a holder that "dies" in the middle
// of a run (nothing records its end) and comes back under the same name
// closes that run as lease_lost when it claims again, and fences it out:
// after its lease expired, and, through BeginFirstJobRun (a process's
// first claim), while the lease is still live. A holder that merely claims
// its next tick in time keeps its token and its run in progress.
func TestSameHolderClosesItsAbandonedRun(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := jobsCtx(t)
	tick := func(i int) time.Time { return time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC) }
	outcome := func(job string, id int64) store.JobRun { t.Helper(); return jobRun(ctx, t, st, job, id) }

	t.Run("after the lease expired", func(t *testing.T) {
		first, ok, err := st.BeginJobRun(ctx, "expired", "H", tick(1), 200*time.Millisecond)
		require.NoError(t, err)
		require.True(t, ok)
		dlqtest.Eventually(t, 10*time.Second, func() bool {
			leases, err := st.JobLeases(ctx)
			require.NoError(t, err)
			for _, l := range leases {
				if l.Job == "expired" {
					return !l.Held
				}
			}
			return false
		}, "the lease never expired")
		next, ok, err := st.BeginJobRun(ctx, "expired", "H", tick(2), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, first.Lease.Token+1, next.Lease.Token, "an expired lease is taken anew")
		r := outcome("expired", first.RunID)
		require.Equal(t, store.JobLeaseLost, r.Outcome)
		require.Contains(t, r.Error, "abandoned")
		require.NotNil(t, r.FinishedAt)
		require.ErrorIs(t, st.RenewLease(ctx, first.Lease, time.Minute), store.ErrLeaseLost, "the dead run is fenced out")
		require.Equal(t, store.JobRunning, outcome("expired", next.RunID).Outcome)
	})

	t.Run("restarted while the lease was live", func(t *testing.T) {
		first, ok, err := st.BeginJobRun(ctx, "live", "H", tick(1), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		kept, ok, err := st.BeginJobRun(ctx, "live", "H", tick(2), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, first.Lease.Token, kept.Lease.Token, "a live holder keeps its token")
		require.Equal(t, store.JobRunning, outcome("live", first.RunID).Outcome, "its run in progress stays running")

		restarted, ok, err := st.BeginFirstJobRun(ctx, "live", "H", tick(3), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, first.Lease.Token+1, restarted.Lease.Token)
		for _, id := range []int64{first.RunID, kept.RunID} {
			require.Equal(t, store.JobLeaseLost, outcome("live", id).Outcome, "run %d of the earlier process", id)
		}
		require.ErrorIs(t, st.RenewLease(ctx, first.Lease, time.Minute), store.ErrLeaseLost)
		require.Equal(t, store.JobRunning, outcome("live", restarted.RunID).Outcome)

		// Another instance cannot take it meanwhile.
		_, ok, err = st.BeginFirstJobRun(ctx, "live", "other", tick(4), time.Minute)
		require.NoError(t, err)
		require.False(t, ok)
	})
}

// TestAbandonedRunReadsAsLeaseLost: a run still marked running whose
// holder stopped renewing its lease, with no instance taking the job again
// (it was switched off, or every instance stopped), reads as lease_lost
// with the reason, though its row is not touched; so does one whose token
// is older than the lease's. A holder that was only paused and renews in
// time reads as running again, and the next take of the lease closes the
// row for good.
func TestAbandonedRunReadsAsLeaseLost(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := jobsCtx(t)
	read := func(job string, id int64) store.JobRun { t.Helper(); return jobRun(ctx, t, st, job, id) }
	stored := func(id int64) string {
		t.Helper()
		var outcome string
		require.NoError(t, db.QueryRow(ctx, `SELECT outcome FROM job_runs WHERE id = $1`, id).Scan(&outcome))
		return outcome
	}
	tick := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

	t.Run("lease expired, never taken again", func(t *testing.T) {
		run, ok, err := st.BeginJobRun(ctx, "off", "H", tick, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, store.JobRunning, read("off", run.RunID).Outcome, "a live lease: running")
		require.Nil(t, read("off", run.RunID).FinishedAt)

		// H dies: its lease runs out (backdated rather than waited for),
		// and no instance runs the job any more.
		var expiredAt time.Time
		require.NoError(t, db.QueryRow(ctx, `
UPDATE job_leases SET expires_at = now() - interval '1 minute' WHERE job = 'off' RETURNING expires_at`).Scan(&expiredAt))
		r := read("off", run.RunID)
		require.Equal(t, store.JobLeaseLost, r.Outcome, "nothing holds the run any more")
		require.Contains(t, r.Error, "abandoned")
		require.Contains(t, r.Error, "not taken again")
		require.NotNil(t, r.FinishedAt)
		require.WithinDuration(t, expiredAt, *r.FinishedAt, time.Millisecond, "it ended, as far as anyone knows, when its lease expired")
		require.Equal(t, store.JobRunning, stored(run.RunID), "the read does not write")
		all, err := st.JobRuns(ctx, "", 1000)
		require.NoError(t, err)
		for _, a := range all {
			if a.ID == run.RunID {
				require.Equal(t, store.JobLeaseLost, a.Outcome, "the read of every job says the same")
			}
		}

		// Only paused: it renews under its token, nobody having taken the
		// job, and its run is running again.
		require.NoError(t, st.RenewLease(ctx, run.Lease, time.Minute))
		require.Equal(t, store.JobRunning, read("off", run.RunID).Outcome)

		// Dies for good; the next take closes the row itself.
		_, err = db.Exec(ctx, `UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job = 'off'`)
		require.NoError(t, err)
		_, ok, err = st.BeginJobRun(ctx, "off", "other", tick.Add(time.Minute), time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, store.JobLeaseLost, stored(run.RunID))
		require.Contains(t, read("off", run.RunID).Error, "other took the job")
	})

	t.Run("older token than the lease", func(t *testing.T) {
		run, ok, err := st.BeginJobRun(ctx, "moved", "H", tick, time.Minute)
		require.NoError(t, err)
		require.True(t, ok)
		var old int64
		require.NoError(t, db.QueryRow(ctx, `
INSERT INTO job_runs (job, tick, instance, token) VALUES ('moved', $1, 'gone', $2 - 1) RETURNING id`,
			tick.Add(-time.Minute), run.Lease.Token).Scan(&old))
		r := read("moved", old)
		require.Equal(t, store.JobLeaseLost, r.Outcome, "the lease moved on to a later token")
		require.Contains(t, r.Error, "H took with token")
		require.NotNil(t, r.FinishedAt)
		require.Equal(t, store.JobRunning, read("moved", run.RunID).Outcome, "the current holder's run is running")
	})
}

// jobRun reads run id of job as every front door reads it (JobRuns).
func jobRun(ctx context.Context, t *testing.T, st *store.Store, job string, id int64) store.JobRun {
	t.Helper()
	runs, err := st.JobRuns(ctx, job, 100)
	require.NoError(t, err)
	for _, r := range runs {
		if r.ID == id {
			return r
		}
	}
	t.Fatalf("run %d of %s not found", id, job)
	return store.JobRun{}
}
