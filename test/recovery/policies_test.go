package recovery

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func collectIDs(rows pgx.Rows) ([]int64, error) { return pgx.CollectRows(rows, pgx.RowTo[int64]) }

// retry is a policy over queue: transient failures, first attempt after
// first, then backoff ×2, at most attempts times.
func retry(name, queue string, first time.Duration, attempts int) cron.Policy {
	return cron.Policy{Name: name, Queues: []string{queue}, Categories: []string{"transient"},
		FirstDelay: first, BackoffFactor: 2, MaxDelay: time.Minute, MaxAttempts: attempts}
}

// TestPolicyBackoffThenParked: a transient failure is replayed on the
// policy's schedule, dies again, is retried with backoff, and after
// max_attempts is parked (pending, auto_exhausted); a permanent failure in
// the same queue is never touched. Each attempt is checked against the
// recorded times: the death it followed (the message's death history) and
// the task that made it. Nothing sleeps: the test waits for the records.
func TestPolicyBackoffThenParked(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.dyingQueue(t)
	reg := prometheus.NewRegistry()
	p := retry("orders-timeouts", src, time.Second, 3)
	b.cronService(t, "a", reg, "@every 100ms", p)
	transient := b.fail(t, src, "System.TimeoutException", 1)[0]
	permanent := b.fail(t, src, "System.Text.Json.JsonException", 1)[0]
	require.Equal(t, "transient", b.message(t, transient).Category)
	require.Equal(t, "permanent", b.message(t, permanent).Category)

	dlqtest.Eventually(t, 60*time.Second, func() bool { return b.message(t, transient).AutoExhausted },
		"the message was never parked: %+v", b.policyTasks(t, p.Name))
	m := b.message(t, transient)
	require.Equal(t, store.StatusPending, m.Status)
	require.Equal(t, int64(3), m.ReplayCount, "replayed once per attempt, never more")

	tasks := b.policyTasks(t, p.Name)
	require.Len(t, tasks, 3)
	deaths := b.deaths(t, transient)
	require.Len(t, deaths, 4, "the first death and one per attempt")
	for k, task := range tasks {
		require.Equal(t, []int64{transient}, task.Items)
		require.Equal(t, store.TaskCompleted, task.Status)
		want := p.Delay(transient, k+1)
		waited := task.CreatedAt.Sub(deaths[k])
		require.GreaterOrEqual(t, waited, want-50*time.Millisecond, "attempt %d was made %s after the death it follows; due after %s", k+1, waited, want)
		require.Less(t, waited, want+5*time.Second, "attempt %d was made %s after the death it follows; due after %s", k+1, waited, want)
		require.True(t, deaths[k+1].After(task.CreatedAt), "attempt %d's message died again after it", k+1)
	}
	require.Equal(t, []string{"1s", "2s", "4s"}, []string{p.Delay(transient, 1).String(), p.Delay(transient, 2).String(), p.Delay(transient, 3).String()})

	// The permanent failure: never in a task, no attempt, not parked.
	pm := b.message(t, permanent)
	require.Equal(t, store.StatusPending, pm.Status)
	require.Zero(t, pm.ReplayCount)
	require.False(t, pm.AutoExhausted)
	require.Zero(t, b.count(t, `SELECT count(*) FROM policy_attempts WHERE message_id = $1`, permanent))

	// Metrics and audit: three messages sent, one parked.
	require.Equal(t, 3.0, metric(t, reg, "dlq_policy_replayed_total", p.Name))
	require.Equal(t, 1.0, metric(t, reg, "dlq_policy_parked_total", p.Name))
	require.Equal(t, int64(3), b.count(t, `SELECT count(*) FROM audit_log WHERE actor = $1 AND action = 'replay'`, "policy:"+p.Name))
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM audit_log WHERE actor = $1 AND action = 'policy_park'`, "policy:"+p.Name))

	// The alert rule auto_exhausted fires for the queue.
	dlqtest.Eventually(t, 30*time.Second, func() bool { return firing(t, b, "auto_exhausted", src, "") }, "auto_exhausted never fired")
}

// metric is the value of the series of name (a counter or gauge) with the
// label policy in reg.
func metric(t *testing.T, reg *prometheus.Registry, name, policy string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "policy" && l.GetValue() == policy {
					if m.Counter != nil {
						return m.GetCounter().GetValue()
					}
					return m.GetGauge().GetValue()
				}
			}
		}
	}
	t.Fatalf("no series %s{policy=%q}", name, policy)
	return 0
}

// firing reports whether the saved alert state has rule firing for queue
// or subject.
func firing(t *testing.T, b *bundle, rule, queue, subject string) bool {
	t.Helper()
	rec, err := b.st.LoadAlertState(context.Background())
	require.NoError(t, err)
	if rec.State == nil {
		return false
	}
	var st alerts.State
	require.NoError(t, json.Unmarshal(rec.State, &st))
	for _, a := range st.Alerts {
		if a.Rule == rule && a.SourceQueue == queue && a.Subject == subject && a.Phase == alerts.PhaseFiring {
			return true
		}
	}
	return false
}

// TestPolicyPausesWhenItsCanaryDiesAgain: an attempt with a canary whose
// first message dies again stops (canary_failed), the policy pauses
// itself (state, audit row, gauge, alert), the unsent messages keep their
// attempt, and nothing more is replayed until an operator resumes it.
func TestPolicyPausesWhenItsCanaryDiesAgain(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.dyingQueue(t)
	reg := prometheus.NewRegistry()
	p := retry("billing-canary", src, 200*time.Millisecond, 5)
	p.Canary = &cron.PolicyCanary{Count: 1, WaitSeconds: 1}
	svc := b.cronService(t, "a", reg, "@every 100ms", p)
	ids := b.fail(t, src, "Npgsql.NpgsqlException: Connection refused", 3)

	dlqtest.Eventually(t, 60*time.Second, func() bool {
		v, err := svc.Policies(context.Background())
		require.NoError(t, err)
		return v.Policies[0].Paused
	}, "the policy never paused: %+v", b.policyTasks(t, p.Name))
	tasks := b.policyTasks(t, p.Name)
	require.Len(t, tasks, 1)
	require.Equal(t, store.TaskCanaryFailed, tasks[0].Status)
	v, err := svc.Policies(context.Background())
	require.NoError(t, err)
	require.Contains(t, *v.Policies[0].PausedReason, "canary")
	require.Equal(t, "policy:"+p.Name, *v.Policies[0].PausedBy)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'policy_pause' AND actor = $1`, "policy:"+p.Name))
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return metric(t, reg, "dlq_policy_paused", p.Name) == 1
	}, "dlq_policy_paused is not 1")
	dlqtest.Eventually(t, 30*time.Second, func() bool { return firing(t, b, "policy_paused", "", p.Name) }, "policy_paused never fired")

	// One message was the canary; the two never sent have no attempt.
	var sent, unsent int64
	for _, id := range ids {
		n := b.count(t, `SELECT coalesce(max(attempts), 0) FROM policy_attempts WHERE message_id = $1`, id)
		if b.message(t, id).ReplayCount > 0 {
			sent++
			require.Equal(t, int64(1), n)
		} else {
			unsent++
			require.Zero(t, n)
		}
	}
	require.Equal(t, int64(1), sent)
	require.Equal(t, int64(2), unsent)

	// Paused: several runs go by and make nothing.
	runs := b.count(t, `SELECT count(*) FROM job_runs WHERE job = 'policies'`)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM job_runs WHERE job = 'policies' AND outcome = 'success'`) >= runs+5
	}, "the policies job stopped running")
	require.Len(t, b.policyTasks(t, p.Name), 1)

	// Resumed by an operator: it goes on (and pauses again, the queue
	// still kills everything).
	_, err = b.st.SetPolicyPaused(context.Background(), p.Name, false, "", store.Actor{Name: "jane", Role: "operator", Via: "api"})
	require.NoError(t, err)
	dlqtest.Eventually(t, 60*time.Second, func() bool { return len(b.policyTasks(t, p.Name)) == 2 }, "no attempt after the resume")
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'policy_resume' AND actor = 'jane'`))
}

// TestPolicyTwoInstances: two instances run the policies job on the same
// database; every attempt happens exactly once (each message in exactly
// max_attempts tasks, replayed exactly that often), both instances take
// turns running the job, and when the instance holding it stops, the
// other takes it over.
func TestPolicyTwoInstances(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.dyingQueue(t)
	// Attempts a second or more apart: the instance holding the job is
	// stopped right after the first, and the other makes the rest.
	p := retry("shared", src, 1500*time.Millisecond, 3)
	p.BackoffFactor = 1
	p.Jitter = 0.3
	instances := map[string]*cron.Service{
		"instance-a": b.cronService(t, "instance-a", prometheus.NewRegistry(), "@every 50ms", p),
		"instance-b": b.cronService(t, "instance-b", prometheus.NewRegistry(), "@every 50ms", p),
	}
	ids := b.fail(t, src, "System.TimeoutException", 20)

	// Once the first attempts are made, the instance holding the job
	// stops; the other takes over. The one stopped is the holder once it
	// has a successful run: with a lease of a second a loaded machine can
	// pass the lease between the two before the stop, and the holder of
	// that moment may not have finished a run yet.
	dlqtest.Eventually(t, 60*time.Second, func() bool { return len(b.policyTasks(t, p.Name)) > 0 }, "no attempt")
	var stopped string
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		leases, err := b.st.JobLeases(context.Background())
		require.NoError(t, err)
		for _, l := range leases {
			if l.Job == cron.JobPolicies && b.count(t, `SELECT count(*) FROM job_runs WHERE job = 'policies' AND outcome = 'success' AND instance = $1`, l.Holder) > 0 {
				stopped = l.Holder
				return true
			}
		}
		return false
	}, "no holder of the policies job's lease with a successful run")
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	require.NoError(t, instances[stopped].Stop(ctx))
	cancel()
	var stoppedAt time.Time
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT now()`).Scan(&stoppedAt))

	dlqtest.Eventually(t, 90*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM dead_messages WHERE source_queue = $1 AND auto_exhausted`, src) == int64(len(ids))
	}, "not every message was parked: %d of %d", b.count(t, `SELECT count(*) FROM dead_messages WHERE source_queue = $1 AND auto_exhausted`, src), len(ids))
	perMessage := map[int64]int{}
	for _, task := range b.policyTasks(t, p.Name) {
		require.Equal(t, store.TaskCompleted, task.Status)
		for _, id := range task.Items {
			perMessage[id]++
		}
	}
	for _, id := range ids {
		require.Equal(t, 3, perMessage[id], "message %d: attempts", id)
		require.Equal(t, int64(3), b.message(t, id).ReplayCount, "message %d: published once per attempt", id)
	}
	// The other takes the job over after the stop.
	other := "instance-a"
	if stopped == other {
		other = "instance-b"
	}
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return b.count(t, `SELECT count(*) FROM job_runs WHERE job = 'policies' AND outcome = 'success' AND instance = $1 AND started_at > $2`, other, stoppedAt) > 0
	}, "%s never ran the job after %s stopped", other, stopped)
	require.Equal(t, int64(2), b.count(t, `SELECT count(DISTINCT instance) FROM job_runs WHERE job = 'policies' AND outcome = 'success'`),
		"both instances ran the job")
}

// TestPolicyDryRun: a policy in dry-run mode records what it would replay
// and replays nothing.
func TestPolicyDryRun(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src := b.dyingQueue(t)
	p := retry("careful", src, 200*time.Millisecond, 3)
	p.DryRun = true
	svc := b.cronService(t, "a", prometheus.NewRegistry(), "@every 100ms", p)
	ids := b.fail(t, src, "System.TimeoutException", 3)
	b.fail(t, src, "System.Text.Json.JsonException", 1)
	var view cron.PolicyView
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		v, err := svc.Policies(context.Background())
		require.NoError(t, err)
		view = v.Policies[0]
		return view.LastDryRun != nil && view.LastDryRun.Due == 3
	}, "no dry run of the three transient failures: %+v", view.LastDryRun)
	require.Equal(t, ids, view.LastDryRun.Sample)
	require.Zero(t, view.LastDryRun.WouldPark)
	require.Empty(t, b.policyTasks(t, p.Name), "a dry run replays nothing")
	require.Zero(t, b.count(t, `SELECT count(*) FROM policy_attempts`))
}
