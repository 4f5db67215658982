package cleanup

import (
	"context"

	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func TestParseSchedule(t *testing.T) {
	t.Parallel()
	for _, ok := range []string{"@every 200ms", "@every 1m", "*/5 * * * *", "0 3 * * *", "@hourly", "@daily", "CRON_TZ=Europe/Berlin 0 3 * * *"} {
		_, err := ParseSchedule(ok)
		require.NoError(t, err, ok)
	}
	for _, bad := range []string{"", "@every", "@every -1s", "@every 1ms", "@every soon", "* * *", "61 * * * *", "@sometimes"} {
		_, err := ParseSchedule(bad)
		require.Error(t, err, bad)
	}
}

func TestLastActivation(t *testing.T) {
	t.Parallel()
	every, err := ParseSchedule("@every 200ms")
	require.NoError(t, err)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	require.Equal(t, base, lastActivation(every, base))
	require.Equal(t, base, lastActivation(every, base.Add(199*time.Millisecond)))
	require.Equal(t, base.Add(200*time.Millisecond), lastActivation(every, base.Add(200*time.Millisecond)))
	require.Equal(t, base.Add(200*time.Millisecond), every.Next(base))
	require.Equal(t, 200*time.Millisecond, interval(every, base))

	daily, err := ParseSchedule("0 3 * * *")
	require.NoError(t, err)
	at3 := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	require.Equal(t, at3, lastActivation(daily, at3))
	require.Equal(t, at3, lastActivation(daily, at3.Add(5*time.Second)))
	require.Equal(t, at3.Add(-24*time.Hour), lastActivation(daily, at3.Add(-time.Second)))
	require.Equal(t, 24*time.Hour, interval(daily, at3))

	// Weekdays only: Monday's tick is found across the weekend gap.
	weekdays, err := ParseSchedule("0 9 * * 1-5")
	require.NoError(t, err)
	fri := time.Date(2026, 3, 6, 9, 0, 0, 0, time.UTC) // a Friday
	require.Equal(t, time.Friday, fri.Weekday())
	require.Equal(t, fri, lastActivation(weekdays, fri.Add(60*time.Hour)))
}

// execLog records every execution of every job by (job, tick).
type execLog struct {
	mu   sync.Mutex
	runs map[string]map[time.Time][]string // job -> tick -> instances
}

func (e *execLog) add(job string, tick time.Time, instance string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.runs == nil {
		e.runs = map[string]map[time.Time][]string{}
	}
	if e.runs[job] == nil {
		e.runs[job] = map[time.Time][]string{}
	}
	e.runs[job][tick] = append(e.runs[job][tick], instance)
}

func (e *execLog) ticks(job string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return len(e.runs[job])
}

// TestSchedulerExactlyOncePerTick runs three schedulers over one database
// with two jobs on @every 200ms. Partway through, the instance holding
// each job is stopped so another one has to take over. Every tick from the
// first to the last must have run exactly once: never twice, never
// skipped, except the ticks inside the takeover window (the lease TTL).
func TestSchedulerExactlyOncePerTick(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	const every = 200 * time.Millisecond
	const ttl = 600 * time.Millisecond
	var log execLog
	var inFlight [2]atomic.Int32
	var overlap atomic.Bool
	jobs := func(instance string) []Job {
		var out []Job
		for i, name := range []string{"alpha", "beta"} {
			out = append(out, Job{Name: name, Schedule: "@every 200ms", Run: func(ctx context.Context, r *Run) (int64, error) {
				if inFlight[i].Add(1) > 1 {
					overlap.Store(true)
				}
				defer inFlight[i].Add(-1)
				log.add(r.Job, r.Tick, instance)
				time.Sleep(20 * time.Millisecond) // a run that takes a while
				return 1, nil
			}})
		}
		return out
	}
	scheds := map[string]*Scheduler{}
	for i := range 3 {
		name := fmt.Sprintf("inst-%d", i)
		s, err := NewScheduler(SchedulerConfig{
			Store: st, Jobs: jobs(name), Instance: name, LeaseTTL: ttl,
			Logger: testLogger(t), Registerer: prometheus.NewRegistry(),
		})
		require.NoError(t, err)
		scheds[name] = s
		s.Start()
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
	}
	dlqtest.Eventually(t, 30*time.Second, func() bool { return log.ticks("alpha") >= 15 && log.ticks("beta") >= 15 },
		"jobs did not run 15 ticks each")

	// Stop the current holder of alpha; someone else must carry on.
	leases, err := st.JobLeases(ctxT(t))
	require.NoError(t, err)
	var holder string
	heldBy := map[string]string{}
	for _, l := range leases {
		heldBy[l.Job] = l.Holder
		if l.Job == "alpha" {
			holder = l.Holder
		}
	}
	require.NotEmpty(t, holder)
	stoppedAt := time.Now()
	require.NoError(t, scheds[holder].Stop(ctxT(t)))
	before := log.ticks("alpha")
	dlqtest.Eventually(t, 30*time.Second, func() bool { return log.ticks("alpha") >= before+15 },
		"alpha did not continue after its holder stopped")
	for _, s := range scheds {
		require.NoError(t, s.Stop(ctxT(t)))
	}
	require.False(t, overlap.Load(), "two runs of one job overlapped")

	for _, job := range []string{"alpha", "beta"} {
		log.mu.Lock()
		runs := log.runs[job]
		log.mu.Unlock()
		var ticks []time.Time
		for tick, who := range runs {
			require.Len(t, who, 1, "job %s tick %s ran on %v", job, tick, who)
			ticks = append(ticks, tick)
		}
		slices.SortFunc(ticks, time.Time.Compare)
		var missing []time.Time
		for at := ticks[0]; !at.After(ticks[len(ticks)-1]); at = at.Add(every) {
			if _, ok := runs[at]; !ok {
				missing = append(missing, at)
			}
		}
		for _, at := range missing {
			// The only gap allowed is the takeover: the stopped holder's
			// lease must expire first.
			require.True(t, heldBy[job] == holder && at.After(stoppedAt.Add(-every)) && at.Before(stoppedAt.Add(ttl+2*every)),
				"job %s: tick %s was never run (holder stopped at %s)", job, at.Format(time.RFC3339Nano), stoppedAt.Format(time.RFC3339Nano))
		}
		// The database agrees: one job_runs row per executed tick.
		require.Equal(t, int64(len(ticks)), countWhere(t, st, `SELECT count(*) FROM job_runs WHERE job = $1 AND outcome = 'success'`, job))
	}
	// Alpha really changed hands, with a new token.
	var instances, tokens int64
	require.NoError(t, st.Pool().QueryRow(ctxT(t),
		`SELECT count(DISTINCT instance), count(DISTINCT token) FROM job_runs WHERE job = 'alpha'`).Scan(&instances, &tokens))
	require.GreaterOrEqual(t, instances, int64(2))
	require.GreaterOrEqual(t, tokens, int64(2))
}

// TestSchedulerPanic: a job that panics is recorded as a failed run with
// the panic in its error, counted, and the scheduler (and the process)
// carries on with the next ticks.
func TestSchedulerPanic(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	reg := prometheus.NewRegistry()
	var calls atomic.Int32
	s, err := NewScheduler(SchedulerConfig{
		Store: st, Instance: "solo", Logger: quietLogger(), Registerer: reg,
		Jobs: []Job{{Name: "boom", Schedule: "@every 100ms", Run: func(ctx context.Context, r *Run) (int64, error) {
			if calls.Add(1) == 1 {
				var m map[string]int
				m["nil map"]++ // a real runtime panic
			}
			return 0, nil
		}}},
	})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		return countWhere(t, st, `SELECT count(*) FROM job_runs WHERE job = 'boom' AND outcome = 'success'`) >= 3
	}, "job did not keep running after its panic")
	require.NoError(t, s.Stop(ctxT(t)))
	var errText string
	require.NoError(t, st.Pool().QueryRow(ctxT(t),
		`SELECT error FROM job_runs WHERE job = 'boom' AND outcome = 'failure'`).Scan(&errText))
	require.Contains(t, errText, "panicked")
	require.Contains(t, errText, "assignment to entry in nil map")
	require.Equal(t, 1.0, metricValue(t, reg, "dlq_job_runs_total", map[string]string{"job": "boom", "outcome": "failure"}))
	require.GreaterOrEqual(t, metricValue(t, reg, "dlq_job_runs_total", map[string]string{"job": "boom", "outcome": "success"}), 3.0)
	require.GreaterOrEqual(t, metricValue(t, reg, "dlq_job_duration_seconds", map[string]string{"job": "boom"}), 4.0)
}

// TestLeaseFencing checks the store's lease rules directly: the token
// grows when the lease changes hands, a former holder's fenced writes and
// renewals fail, and a holder renewing in time keeps its token.
func TestLeaseFencing(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := ctxT(t)
	tick := func(i int) time.Time { return time.Date(2026, 1, 1, 0, 0, i, 0, time.UTC) }

	a, ok, err := st.BeginJobRun(ctx, "j", "A", tick(1), 300*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	_, ok, err = st.BeginJobRun(ctx, "j", "B", tick(2), time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "B took a lease A holds")
	a2, ok, err := st.BeginJobRun(ctx, "j", "A", tick(2), 300*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, a.Lease.Token, a2.Lease.Token, "renewing in time keeps the token")
	_, ok, err = st.BeginJobRun(ctx, "j", "A", tick(2), 300*time.Millisecond)
	require.NoError(t, err)
	require.False(t, ok, "the same tick ran twice")

	require.NoError(t, st.SaveAlertState(ctx, a.Lease, []byte(`{"by":"A"}`)))
	var b store.JobRunStart
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		var err error
		b, ok, err = st.BeginJobRun(ctx, "j", "B", tick(3), time.Minute)
		require.NoError(t, err)
		return ok
	}, "B never got the expired lease")
	require.Equal(t, a.Lease.Token+1, b.Lease.Token)

	err = st.SaveAlertState(ctx, a.Lease, []byte(`{"by":"A, late"}`))
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.ErrorIs(t, st.RenewLease(ctx, a.Lease, time.Minute), store.ErrLeaseLost)
	require.NoError(t, st.SaveAlertState(ctx, b.Lease, []byte(`{"by":"B"}`)))
	rec, err := st.LoadAlertState(ctx)
	require.NoError(t, err)
	require.JSONEq(t, `{"by":"B"}`, string(rec.State))
	require.Equal(t, "B", rec.Holder)
	_, ok, err = st.BeginJobRun(ctx, "j", "A", tick(4), time.Minute)
	require.NoError(t, err)
	require.False(t, ok)
}

// TestFencedWriteBlocksTakeover: while a holder's fenced transaction is
// open, another instance cannot take the lease (it gives up quickly rather
// than wait), and what the holder commits lands before any takeover.
func TestFencedWriteBlocksTakeover(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := ctxT(t)
	a, ok, err := st.BeginJobRun(ctx, "j", "A", time.Unix(1, 0), 50*time.Millisecond)
	require.NoError(t, err)
	require.True(t, ok)
	conn, err := st.Pool().Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM job_leases WHERE job = 'j' AND token = $1 FOR SHARE`, a.Lease.Token)
	require.NoError(t, err)
	time.Sleep(100 * time.Millisecond) // let the lease expire while the fence is held
	began := time.Now()
	_, ok, err = st.BeginJobRun(ctx, "j", "B", time.Unix(2, 0), time.Minute)
	require.NoError(t, err)
	require.False(t, ok, "B took the lease while A's fenced write was open")
	require.Less(t, time.Since(began), 5*time.Second)
	require.NoError(t, tx.Commit(ctx))
	_, ok, err = st.BeginJobRun(ctx, "j", "B", time.Unix(3, 0), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
}
