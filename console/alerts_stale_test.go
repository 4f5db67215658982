package console_test

import (
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/internal/dlqtest"
)

// TestOverviewSaysAlertEvaluationStopped: an alert firing at the last
// evaluation is on the overview as firing while that evaluation is
// recent. Once it is stale (evaluated long ago, nobody evaluating since:
// the console's instance has the alerts job off), the overview says in
// words that alert evaluation is not running and since when, lists no
// alert-row, and names what was firing then; the jobs page shows the
// alert as unknown, was firing.
func TestOverviewSaysAlertEvaluationStopped(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(2, "audit")...)
	rs := alerts.RuleSet{Rules: []alerts.Rule{{Name: "audit_backlog", Kind: alerts.KindPendingCount, Threshold: 0}}}
	require.NoError(t, rs.Validate())
	lease := dlqtest.Lease(t, b.st, "alerts")
	save := func(at time.Time) {
		t.Helper()
		// Saved as a dlq before stale_after would have: the reader judges
		// it by its own alerts schedule (off here, so the default @every
		// 1m: stale four minutes after the evaluation).
		state, _ := alerts.Evaluate(alerts.State{}, alerts.Snapshot{At: at, Queues: []alerts.QueueStats{{SourceQueue: "audit", Pending: 2}}}, rs)
		raw, err := json.Marshal(state)
		require.NoError(t, err)
		require.NoError(t, b.st.SaveAlertState(context.Background(), lease, raw))
	}
	c := b.signIn(t, tokViewer)

	save(time.Now())
	r := c.get(t, "/ui/")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, `data-test="alert-row" data-rule="audit_backlog" data-queue="audit"`)
	require.NotContains(t, r.text, `data-test="alerts-stale"`)

	save(time.Now().Add(-time.Hour))
	r = c.get(t, "/ui/")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.NotContains(t, r.text, `data-test="alert-row"`, "no alert is known to be firing")
	require.Contains(t, r.text, `data-test="alerts-stale"`)
	require.Contains(t, r.text, "Alert evaluation is not running")
	require.Contains(t, r.text, "1 h ago", "says since when")
	require.Contains(t, r.text, `data-test="alert-stale-row" data-rule="audit_backlog" data-queue="audit"`)
	require.NotContains(t, r.text, "alert firing</span>", "the queue row is not flagged firing")

	r = c.get(t, "/ui/jobs")
	require.Equal(t, http.StatusOK, r.StatusCode)
	require.Contains(t, r.text, "Alert evaluation is not running")
	require.Contains(t, r.text, `<span class="status status-unknown">unknown</span> (was firing)`)
	require.False(t, strings.Contains(r.text, `status-firing">firing`), "nothing shown firing")
}
