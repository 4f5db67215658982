package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// TestJobsAndAlertsAgainstLiveServer runs jobs and alerts against an API
// whose cron service runs the summary and alert jobs: every message is one
// too many (threshold 0), except in orders (threshold 10), so billing's
// alert fires and orders' does not.
func TestJobsAndAlertsAgainstLiveServer(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t)
	var rules alerts.Config
	rules.Rules = []alerts.Rule{{Name: "pending_count", Kind: alerts.KindPendingCount, Threshold: 0}}
	ten := 10.0
	rules.Overrides = alerts.Overrides{"orders": {"pending_count": {Threshold: &ten}}}
	require.NoError(t, rules.Validate())
	svc, err := cron.New(cron.Config{
		Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(), Instance: "cli-test",
		Schedules: cron.Only(cron.Schedules{Summary: "@every 200ms", Alerts: "@every 200ms"}),
		Alerts:    cron.AlertsConfig{Rules: rules.RuleSet()},
	})
	require.NoError(t, err)
	svc.Start()
	t.Cleanup(func() { _ = svc.Stop(context.Background()) })
	url := clitest.Serve(t, st, svc)
	const viewer = clitest.ViewerToken

	// firing returns the rows of the alerts table that fire.
	firing := func(out string) []string {
		var rows []string
		for _, l := range strings.Split(out, "\n") {
			if f := strings.Fields(l); len(f) > 2 && f[0] == "pending_count" && f[2] == "firing" {
				rows = append(rows, l)
			}
		}
		return rows
	}
	var out string
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, out, _ = cli(t, url, viewer, runAlerts)
		return code == ExitOK && len(firing(out)) > 0
	}, "no alert fired")
	require.Contains(t, out, "evaluated ")
	require.Contains(t, out, "(schedule @every 200ms)")
	rows := firing(out)
	require.Len(t, rows, 1, out)
	require.Equal(t, "billing", strings.Fields(rows[0])[1])
	require.Contains(t, out, "rules:")
	require.Contains(t, out, "orders 10 for 0s", "the override")

	code, out, _ := cli(t, url, viewer, runAlerts, "--json")
	require.Equal(t, ExitOK, code)
	var av cron.AlertsView
	require.NoError(t, json.Unmarshal([]byte(out), &av), out)
	require.Len(t, av.Rules, 1)
	require.NotEmpty(t, av.Alerts)

	dlqtest.Eventually(t, 30*time.Second, func() bool {
		var code int
		code, out, _ = cli(t, url, viewer, runJobs)
		return code == ExitOK && strings.Contains(out, "success")
	}, "no job succeeded")
	require.Contains(t, out, "answered by instance cli-test")
	require.Contains(t, out, "JOB")
	for _, job := range []string{cron.JobSummary, cron.JobCleanup, cron.JobCapacity, cron.JobAlerts} {
		require.Contains(t, out, "\n"+job+" ", out)
	}
	require.Contains(t, out, "cli-test (token ")

	code, out, _ = cli(t, url, viewer, runJobs, cron.JobSummary)
	require.Equal(t, ExitOK, code)
	require.Regexp(t, `^summary: schedule @every 200ms, (idle, last run by|running on) cli-test \(token `, out)
	require.Contains(t, out, "RUN")
	require.Contains(t, out, "success")

	code, out, _ = cli(t, url, viewer, runJobs, "--json")
	require.Equal(t, ExitOK, code)
	var jv cron.JobsView
	require.NoError(t, json.Unmarshal([]byte(out), &jv), out)
	require.Equal(t, "cli-test", jv.Instance)
	require.Len(t, jv.Jobs, 8)
	code, out, _ = cli(t, url, viewer, runJobs, "--json", cron.JobAlerts)
	require.Equal(t, ExitOK, code)
	var one cron.JobView
	require.NoError(t, json.Unmarshal([]byte(out), &one), out)
	require.Equal(t, cron.JobAlerts, one.Name)
	// Flags after the job's name are read too.
	code, out, errOut := cli(t, url, viewer, runJobs, cron.JobAlerts, "--json")
	require.Equal(t, ExitOK, code, errOut)
	require.NoError(t, json.Unmarshal([]byte(out), &one), out)
	require.Equal(t, cron.JobAlerts, one.Name)

	// Exit codes.
	code, _, errOut = cli(t, url, viewer, runJobs, "no-such-job")
	require.Equal(t, ExitNotFound, code)
	require.Contains(t, errOut, "no job")
	code, _, _ = cli(t, url, viewer, runJobs, "a", "b")
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, url, "wrong", runAlerts)
	require.Equal(t, ExitDenied, code)
	code, _, errOut = cli(t, url, "", runJobs)
	require.Equal(t, ExitDenied, code)
	require.Contains(t, errOut, "DLQ_TOKEN")
	code, _, _ = cli(t, "http://127.0.0.1:1", viewer, runAlerts, "--json")
	require.Equal(t, ExitUnavailable, code)
}

// Without a cron service the API answers 503, and the commands say dlq is
// unavailable.
func TestJobsAndAlertsWithoutCron(t *testing.T) {
	t.Parallel()
	url, _, _, _ := clitest.Server(t)
	for _, run := range []func([]string, cliEnv) int{runJobs, runAlerts} {
		code, out, errOut := cli(t, url, clitest.AdminToken, run)
		require.Equal(t, ExitUnavailable, code)
		require.Empty(t, out)
		require.Contains(t, errOut, "unavailable (HTTP 503)")
	}
}

// TestAlertsSaysStale: with the alerts job off on the instance answering
// and the last evaluation an hour old, dlq alerts says that evaluation is
// not running and since when, and shows the alert unknown, not firing.
func TestAlertsSaysStale(t *testing.T) {
	t.Parallel()
	st, _, _ := clitest.Seeded(t)
	rs := alerts.RuleSet{Rules: []alerts.Rule{{Name: "pending_count", Kind: alerts.KindPendingCount, Threshold: 0}}}
	require.NoError(t, rs.Validate())
	svc, err := cron.New(cron.Config{
		Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry(), Instance: "cli-test",
		Schedules: cron.Only(cron.Schedules{}), Alerts: cron.AlertsConfig{Rules: rs},
	})
	require.NoError(t, err)
	at := time.Now().Add(-time.Hour)
	state, _ := alerts.Evaluate(alerts.State{}, alerts.Snapshot{At: at, Queues: []alerts.QueueStats{{SourceQueue: "billing", Pending: 3}}}, rs)
	state.StaleAfter = alerts.StaleBound(everyMinute{}, at)
	raw, err := json.Marshal(state)
	require.NoError(t, err)
	require.NoError(t, st.SaveAlertState(context.Background(), dlqtest.Lease(t, st, cron.JobAlerts), raw))
	url := clitest.Serve(t, st, svc)

	code, out, errOut := cli(t, url, clitest.ViewerToken, runAlerts)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "STALE: alert evaluation is not running")
	require.Contains(t, out, "last evaluated "+timefmt.Human(at))
	require.Contains(t, out, "stale since "+timefmt.Human(state.StaleAfter))
	require.Contains(t, out, "unknown (was firing)")
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) > 2 && f[0] == "pending_count" && f[1] == "billing" {
			require.Equal(t, "unknown", f[2], l)
		}
	}
}

// everyMinute fires on each minute.
type everyMinute struct{}

func (everyMinute) Next(t time.Time) time.Time { return t.Truncate(time.Minute).Add(time.Minute) }

// dlq jobs says a job's holder by the console's rule: a lease that ran out
// between runs is idle, not a fault; only a run marked running whose lease
// expired is stalled.
func TestJobsHolderByTheConsolesRule(t *testing.T) {
	t.Parallel()
	at := time.Date(2026, 5, 1, 12, 0, 0, 0, time.UTC)
	job := func(held bool, outcome string) cron.JobView {
		return cron.JobView{Name: "summary", Schedule: "@every 1m",
			Lease: &store.JobLease{Holder: "a", Token: 3, Held: held, ExpiresAt: at},
			Runs:  []store.JobRun{{Token: 3, Outcome: outcome, StartedAt: at}}}
	}
	for _, c := range []struct {
		j    cron.JobView
		want string
	}{
		{job(false, store.JobSuccess), "idle, last run by a (token 3)"},
		{job(true, store.JobSuccess), "idle, last run by a (token 3)"},
		{job(true, store.JobRunning), "running on a (token 3)"},
		{job(false, store.JobLeaseLost), "STALLED on a (token 3): lease expired 2026-05-01 12:00:00 UTC"},
		{cron.JobView{Name: "summary"}, "-"},
	} {
		var out bytes.Buffer
		printJobs(cliEnv{stdout: &out}, cron.JobsView{Instance: "a", Jobs: []cron.JobView{c.j}})
		require.Contains(t, out.String(), c.want)
		require.Equal(t, c.j.Holder().State == "stalled", strings.Contains(out.String(), "STALLED"), out.String())
	}
}
