package cron

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestJobsShowRunOfDeadHolderAsAbandoned: an instance died in the middle
// of a summary run (nothing recorded its end), and the instance left has
// the job switched off, so nobody takes its lease again. Once that lease
// has expired, the jobs view (GET /api/v1/jobs, /ui/jobs, dlq jobs) shows
// the run as lease_lost, not running for ever.
func TestJobsShowRunOfDeadHolderAsAbandoned(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	run, ok, err := st.BeginFirstJobRun(ctx, JobSummary, "dead", time.Now().UTC().Truncate(time.Minute), 200*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)

	svc, err := New(Config{
		Store: st, Logger: testLogger(t), Registerer: prometheus.NewRegistry(), Instance: "left",
		Schedules: Only(Schedules{}),
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() { _ = svc.Stop(ctxT(t)) })

	summaryRun := func() store.JobRun {
		t.Helper()
		v, err := svc.Jobs(ctx)
		require.NoError(t, err)
		for _, j := range v.Jobs {
			if j.Name == JobSummary {
				require.Equal(t, ScheduleOff, j.Schedule)
				require.Len(t, j.Runs, 1)
				return j.Runs[0]
			}
		}
		t.Fatal("no summary job in the view")
		return store.JobRun{}
	}
	dlqtest.Eventually(t, 10*time.Second, func() bool { return summaryRun().Outcome == store.JobLeaseLost },
		"the dead holder's run still shows as running after its lease expired")
	r := summaryRun()
	require.Equal(t, run.RunID, r.ID)
	require.Contains(t, r.Error, "abandoned")
	require.NotNil(t, r.FinishedAt)
	require.False(t, leaseOf(t, st, JobSummary).Held)
	require.Equal(t, int64(1), countWhere(t, db, `SELECT count(*) FROM job_runs WHERE outcome = 'running'`),
		"the row itself waits for the next take of the lease")
}
