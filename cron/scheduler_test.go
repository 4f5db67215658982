package cron

import (
	"context"

	"fmt"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
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

func TestInterval(t *testing.T) {
	t.Parallel()
	every, err := ParseSchedule("@every 200ms")
	require.NoError(t, err)
	base := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	require.Equal(t, base.Add(200*time.Millisecond), every.Next(base))
	require.Equal(t, base.Add(200*time.Millisecond), every.Next(base.Add(199*time.Millisecond)))
	require.Equal(t, 200*time.Millisecond, interval(every, base))

	daily, err := ParseSchedule("0 3 * * *")
	require.NoError(t, err)
	at3 := time.Date(2026, 3, 1, 3, 0, 0, 0, time.UTC)
	require.Equal(t, at3.Add(24*time.Hour), daily.Next(at3))
	require.Equal(t, 24*time.Hour, interval(daily, at3))
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

// jobRunRow is a job_runs row as the tests check it.
type jobRunRow struct {
	id         int64
	tick       time.Time
	instance   string
	finishedAt *time.Time
	outcome    string
	errText    string
}

func jobRunRows(t *testing.T, db *pgxpool.Pool, job string) map[time.Time]jobRunRow {
	t.Helper()
	rows, err := db.Query(ctxT(t), `
SELECT id, tick, instance, finished_at, outcome, coalesce(error, '') FROM job_runs WHERE job = $1`, job)
	require.NoError(t, err)
	out := map[time.Time]jobRunRow{}
	for rows.Next() {
		var r jobRunRow
		require.NoError(t, rows.Scan(&r.id, &r.tick, &r.instance, &r.finishedAt, &r.outcome, &r.errText))
		out[r.tick.UTC()] = r
	}
	require.NoError(t, rows.Err())
	return out
}

// skippedRunRe reads the run a skipped tick waited for from its error.
var skippedRunRe = regexp.MustCompile(`^skipped: run (\d+) \(tick [^)]*\) was still running on (\S+) when tick`)

// checkSkipped requires that the skipped tick r names a run of the same job,
// on the same instance, for an earlier tick, that really was still running
// at r's tick: a tick is skipped only for that reason.
func checkSkipped(t *testing.T, job string, r jobRunRow, byID map[int64]jobRunRow) {
	t.Helper()
	m := skippedRunRe.FindStringSubmatch(r.errText)
	require.NotNil(t, m, "job %s tick %s skipped for an unexpected reason: %q", job, r.tick, r.errText)
	id, err := strconv.ParseInt(m[1], 10, 64)
	require.NoError(t, err)
	prev, ok := byID[id]
	require.True(t, ok, "job %s tick %s: skipped for run %d, which is not one of its runs", job, r.tick, id)
	require.Equal(t, r.instance, prev.instance, "job %s tick %s skipped by an instance that was not running it", job, r.tick)
	require.Equal(t, m[2], prev.instance)
	require.True(t, prev.tick.Before(r.tick), "job %s tick %s skipped for a later run %d", job, r.tick, id)
	require.NotNil(t, prev.finishedAt)
	require.True(t, prev.finishedAt.After(r.tick), "job %s tick %s skipped, but run %d had finished at %s", job, r.tick, id, prev.finishedAt)
}

// TestSchedulerExactlyOncePerTick runs three schedulers over one database
// with two jobs on @every 200ms. Partway through, the instance holding
// alpha is stopped so another one has to take over. From the first tick to
// the last, every tick has exactly one job_runs row, and
//   - it ran exactly once, on the instance the row names (success), or
//   - it was skipped, by the instance whose previous run of the job was
//     genuinely still running at the tick (on a loaded machine a 20 ms run
//     can take that long);
//   - the only ticks with no row are those of a job whose lease the stopped
//     instance held, until that lease expired: the first tick after it runs
//     elsewhere.
//
// Nothing here waits a fixed time: it polls for progress with deadlines,
// and the windows it allows come from the database (the lease's expiry,
// the runs' finish times), so it holds however slow the machine is.
func TestSchedulerExactlyOncePerTick(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	const every = 200 * time.Millisecond
	const ttl = 600 * time.Millisecond
	var log execLog
	var inFlight [2]atomic.Int32
	var overlap atomic.Value
	jobs := func(instance string) []Job {
		var out []Job
		for i, name := range []string{"alpha", "beta"} {
			out = append(out, Job{Name: name, Schedule: "@every 200ms", Run: func(ctx context.Context, r *Run) (int64, error) {
				if inFlight[i].Add(1) > 1 {
					overlap.Store(fmt.Sprintf("%s tick %s on %s (token %d) started while another run was in progress", r.Job, r.Tick, instance, r.Lease.Token))
				}
				defer inFlight[i].Add(-1)
				log.add(r.Job, r.Tick, instance)
				time.Sleep(20 * time.Millisecond) // the run's work: it takes a while
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
	dlqtest.Eventually(t, time.Minute, func() bool { return log.ticks("alpha") >= 15 && log.ticks("beta") >= 15 },
		"jobs did not run 15 ticks each")

	// Stop the current holder of alpha; someone else must carry on.
	leases, err := st.JobLeases(ctxT(t))
	require.NoError(t, err)
	var holder string
	for _, l := range leases {
		if l.Job == "alpha" {
			holder = l.Holder
		}
	}
	require.NotEmpty(t, holder)
	stoppedAt := time.Now()
	t.Logf("stopping %s, the holder of alpha", holder)
	require.NoError(t, scheds[holder].Stop(ctxT(t)))
	t.Logf("stopped %s in %s", holder, time.Since(stoppedAt))
	// Stop waited for the holder's claims and runs: nothing it does moves
	// its leases any more, so these are when its holdings end (it may hold
	// beta too).
	expiry := map[string]time.Time{}
	leases, err = st.JobLeases(ctxT(t))
	require.NoError(t, err)
	for _, l := range leases {
		if l.Holder == holder {
			expiry[l.Job] = l.ExpiresAt
		}
	}
	require.Contains(t, expiry, "alpha")
	before := log.ticks("alpha")
	dlqtest.Eventually(t, time.Minute, func() bool { return log.ticks("alpha") >= before+15 },
		"alpha did not continue after its holder stopped")
	finalStopAt := time.Now()
	t.Logf("alpha carried on")
	for _, s := range scheds {
		require.NoError(t, s.Stop(ctxT(t)))
	}
	t.Logf("all stopped in %s", time.Since(finalStopAt))
	require.Nil(t, overlap.Load(), "two runs of one job overlapped")

	for _, job := range []string{"alpha", "beta"} {
		rows := jobRunRows(t, db, job)
		byID := map[int64]jobRunRow{}
		var ticks []time.Time
		for tick, r := range rows {
			byID[r.id] = r
			ticks = append(ticks, tick)
		}
		slices.SortFunc(ticks, time.Time.Compare)
		log.mu.Lock()
		ran := log.runs[job]
		log.mu.Unlock()
		for tick, who := range ran {
			require.Len(t, who, 1, "job %s tick %s ran on %v", job, tick, who)
			require.Contains(t, rows, tick.UTC(), "job %s tick %s ran without a job_runs row", job, tick)
		}
		var skipped int
		for at := ticks[0]; !at.After(ticks[len(ticks)-1]); at = at.Add(every) {
			r, ok := rows[at]
			if !ok {
				// The only gap allowed is the takeover: the stopped
				// holder's lease must expire first.
				require.True(t, at.After(stoppedAt.Add(-every)) && at.Before(expiry[job]),
					"job %s: tick %s has no run (%s stopped at %s holding leases until %v)",
					job, at.Format(time.RFC3339Nano), holder, stoppedAt.Format(time.RFC3339Nano), expiry)
				continue
			}
			switch r.outcome {
			case store.JobSuccess:
				require.Equal(t, []string{r.instance}, ran[at], "job %s tick %s: recorded on %s", job, at, r.instance)
			case store.JobSkipped:
				require.Empty(t, ran[at], "job %s tick %s: skipped but ran", job, at)
				if strings.HasPrefix(r.errText, "skipped: the instance stopped") {
					// A tick claimed as its instance was stopping.
					require.True(t, (r.instance == holder && at.After(stoppedAt.Add(-every))) || at.After(finalStopAt.Add(-every)),
						"job %s tick %s: skipped by %s as stopping, long before it stopped: %s", job, at, r.instance, r.errText)
					continue
				}
				checkSkipped(t, job, r, byID)
				skipped++
			default:
				require.Failf(t, "unexpected outcome", "job %s tick %s: %s %s", job, at, r.outcome, r.errText)
			}
		}
		t.Logf("job %s: %d ticks, %d skipped because the previous run was still running", job, len(ticks), skipped)
	}
	// Alpha really changed hands, with a new token.
	var instances, tokens int64
	require.NoError(t, db.QueryRow(ctxT(t),
		`SELECT count(DISTINCT instance), count(DISTINCT token) FROM job_runs WHERE job = 'alpha'`).Scan(&instances, &tokens))
	require.GreaterOrEqual(t, instances, int64(2))
	require.GreaterOrEqual(t, tokens, int64(2))
}

// TestSchedulerOverrunWaitsThenSkips: a run that goes on past the next
// ticks. Two instances; the holder's first run blocks until released. The
// tick after it waits for it and then runs; ticks that came in between are
// recorded as skipped by the holder, naming the run that was still going,
// and counted; the other instance runs none of them.
func TestSchedulerOverrunWaitsThenSkips(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	release := make(chan struct{})
	var first atomic.Bool
	var runs atomic.Int32
	var inFlight atomic.Int32
	var overlap atomic.Bool
	regs := map[string]*prometheus.Registry{}
	var scheds []*Scheduler
	for i := range 2 {
		name := fmt.Sprintf("inst-%d", i)
		regs[name] = prometheus.NewRegistry()
		s, err := NewScheduler(SchedulerConfig{
			Store: st, Instance: name, LeaseTTL: 2 * time.Second, Logger: quietLogger(), Registerer: regs[name],
			Jobs: []Job{{Name: "slow", Schedule: "@every 100ms", Run: func(ctx context.Context, r *Run) (int64, error) {
				if inFlight.Add(1) > 1 {
					overlap.Store(true)
				}
				defer inFlight.Add(-1)
				runs.Add(1)
				if first.CompareAndSwap(false, true) {
					select {
					case <-release:
					case <-ctx.Done():
						return 0, ctx.Err()
					}
				}
				return 1, nil
			}}},
		})
		require.NoError(t, err)
		scheds = append(scheds, s)
		s.Start()
		t.Cleanup(func() { _ = s.Stop(context.Background()) })
	}
	dlqtest.Eventually(t, time.Minute, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'slow' AND outcome = 'skipped'`) >= 3
	}, "no ticks were skipped while the first run was going")
	require.Equal(t, int32(1), runs.Load(), "a tick ran while the first run was going")
	close(release)
	dlqtest.Eventually(t, time.Minute, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'slow' AND outcome = 'success'`) >= 3
	}, "the job did not carry on after the long run")
	stopAt := time.Now()
	for _, s := range scheds {
		require.NoError(t, s.Stop(ctxT(t)))
	}
	require.False(t, overlap.Load(), "two runs of one job overlapped")

	rows := jobRunRows(t, db, "slow")
	byID := map[int64]jobRunRow{}
	var long jobRunRow
	for _, r := range rows {
		byID[r.id] = r
		if long.id == 0 || r.tick.Before(long.tick) {
			long = r
		}
	}
	require.Equal(t, store.JobSuccess, long.outcome)
	var skipped, stopSkipped int
	var stopping []jobRunRow
	var next *jobRunRow
	for _, r := range rows {
		if r.outcome == store.JobSkipped && strings.HasPrefix(r.errText, "skipped: the instance stopped") {
			// A tick claimed as its instance was stopping (checked below:
			// after the long run, so it hides none of the overrun's skips).
			stopping = append(stopping, r)
			if r.instance == long.instance {
				stopSkipped++
			}
			continue
		}
		if r.outcome == store.JobSkipped {
			checkSkipped(t, "slow", r, byID)
			require.Contains(t, r.errText, fmt.Sprintf("run %d ", long.id))
			skipped++
			continue
		}
		if r.id != long.id && (next == nil || r.tick.Before(next.tick)) {
			r := r
			next = &r
		}
	}
	// The first tick after the skipped ones is the one that waited: it ran
	// once the long run had ended, on the same instance.
	require.NotNil(t, next)
	require.Equal(t, long.instance, next.instance)
	var nextStart, longEnd time.Time
	require.NoError(t, db.QueryRow(ctxT(t), `SELECT started_at FROM job_runs WHERE id = $1`, next.id).Scan(&nextStart))
	require.NoError(t, db.QueryRow(ctxT(t), `SELECT finished_at FROM job_runs WHERE id = $1`, long.id).Scan(&longEnd))
	require.False(t, nextStart.Before(longEnd), "the waiting tick started at %s, before the long run ended at %s", nextStart, longEnd)
	for _, r := range rows {
		if r.tick.After(long.tick) && r.tick.Before(next.tick) {
			require.Equal(t, store.JobSkipped, r.outcome, "tick %s between the long run and the next one", r.tick)
		}
	}
	for _, r := range stopping {
		require.True(t, r.tick.After(longEnd) && r.tick.After(stopAt.Add(-5*time.Second)),
			"tick %s skipped by %s as stopping, but the stop began at %s and the long run ended at %s", r.tick, r.instance, stopAt, longEnd)
	}
	require.Equal(t, float64(skipped+stopSkipped), metricValue(t, regs[long.instance], "dlq_job_runs_total", map[string]string{"job": "slow", "outcome": store.JobSkipped}))
}

// TestSchedulerRestartedUnderSameName: a process holding a job dies in the
// middle of a run, and a new one comes up under the same instance name
// before the lease expires (a restart with the same DLQ_INSTANCE). The new
// process runs the job at once, and the run its predecessor left is closed
// as lease_lost instead of staying running for ever, its lease fenced out.
func TestSchedulerRestartedUnderSameName(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	dead, ok, err := st.BeginJobRun(ctx, "restarted", "H", time.Now().UTC().Add(-time.Second).Truncate(time.Millisecond), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)

	s, err := NewScheduler(SchedulerConfig{
		Store: st, Instance: "H", LeaseTTL: time.Minute, Logger: testLogger(t), Registerer: prometheus.NewRegistry(),
		Jobs: []Job{{Name: "restarted", Schedule: "@every 100ms", Run: func(context.Context, *Run) (int64, error) { return 1, nil }}},
	})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'restarted' AND outcome = 'success'`) >= 3
	}, "the restarted process did not run the job")
	require.NoError(t, s.Stop(ctx))

	var outcome, errText string
	require.NoError(t, db.QueryRow(ctx, `SELECT outcome, coalesce(error, '') FROM job_runs WHERE id = $1`, dead.RunID).Scan(&outcome, &errText))
	require.Equal(t, store.JobLeaseLost, outcome, "the dead process's run")
	require.Contains(t, errText, "abandoned")
	require.ErrorIs(t, st.RenewLease(ctx, dead.Lease, time.Minute), store.ErrLeaseLost, "the dead process's lease is fenced out")
	require.Zero(t, countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'restarted' AND outcome = 'running'`))
	require.Equal(t, int64(1), countWhere(t, db, `SELECT count(DISTINCT token) FROM job_runs WHERE job = 'restarted' AND id <> $1`, dead.RunID),
		"the new process took one token and kept it")
}

// TestSchedulerPanic: a job that panics is recorded as a failed run with
// the panic in its error, counted, and the scheduler (and the process)
// carries on with the next ticks.
func TestSchedulerPanic(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	reg := prometheus.NewRegistry()
	var calls atomic.Int32
	s, err := NewScheduler(SchedulerConfig{
		Store: st, Instance: "solo", Logger: quietLogger(), Registerer: reg,
		Jobs: []Job{{Name: "boom", Schedule: "@every 100ms", Run: func(ctx context.Context, r *Run) (int64, error) {
			if calls.Add(1) == 1 {
				var m map[string]int
				//lint:ignore SA5000 the panic is the point of this job
				m["nil map"]++ // a real runtime panic
			}
			return 0, nil
		}}},
	})
	require.NoError(t, err)
	s.Start()
	t.Cleanup(func() { _ = s.Stop(context.Background()) })
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		return countWhere(t, db, `SELECT count(*) FROM job_runs WHERE job = 'boom' AND outcome = 'success'`) >= 3
	}, "job did not keep running after its panic")
	require.NoError(t, s.Stop(ctxT(t)))
	var errText string
	require.NoError(t, db.QueryRow(ctxT(t),
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
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := ctxT(t)
	a, ok, err := st.BeginJobRun(ctx, "j", "A", time.Unix(1, 0), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	// A's lease has run out (backdated rather than waited for, and before
	// the fence: the fence's share lock would hold this update back), so
	// only the fence can keep B out.
	_, err = db.Exec(ctx, `UPDATE job_leases SET expires_at = now() - interval '1 second' WHERE job = 'j'`)
	require.NoError(t, err)
	conn, err := db.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	tx, err := conn.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT 1 FROM job_leases WHERE job = 'j' AND token = $1 FOR SHARE`, a.Lease.Token)
	require.NoError(t, err)
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
