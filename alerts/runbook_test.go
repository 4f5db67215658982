package alerts

import (
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

const testRunbook = "https://wiki.example/dlq/RUNBOOK.md"

// runbookAlerts returns a firing pending_count alert on orders and a
// resolved depth_nonzero alert on billing, evaluated with base as the
// runbook, and the state after them.
func runbookAlerts(t *testing.T, base string) (State, Alert, Alert) {
	t.Helper()
	zero := time.Duration(0)
	rs := RuleSet{
		Rules:          rules("pending_count", "depth_nonzero"),
		Overrides:      Overrides{"billing": {"depth_nonzero": {For: &zero}}},
		RunbookBaseURL: base,
	}
	require.NoError(t, rs.Validate())
	st, _ := Evaluate(State{}, pending(t0, map[string]int64{"billing": 1}), rs)
	st, notes := Evaluate(st, pending(t0.Add(time.Minute), map[string]int64{"orders": 150}), rs)
	require.Len(t, notes, 2)
	return st, notes[1], notes[0]
}

// TestRunbookURLInEveryPayload: the webhook, Slack and Alertmanager
// payloads and the log carry each alert's runbook section, for firing and
// resolved alerts, and so do the firing alerts Alertmanager is refreshed
// with (rebuilt from the saved state).
func TestRunbookURLInEveryPayload(t *testing.T) {
	t.Parallel()
	st, firing, resolved := runbookAlerts(t, testRunbook)
	wantFiring := testRunbook + "#rule-pending_count"
	wantResolved := testRunbook + "#rule-depth_nonzero"

	webhook, slack, am := newReceiver(t), newReceiver(t), newReceiver(t)
	wn, err := NewWebhookNotifier(WebhookConfig{URL: webhook.URL})
	require.NoError(t, err)
	sn, err := NewSlackNotifier(SlackConfig{URL: slack.URL})
	require.NoError(t, err)
	an, err := NewAlertmanagerNotifier(AlertmanagerConfig{URL: am.URL})
	require.NoError(t, err)
	var logs syncBuffer
	d, err := NewDispatcher(DispatcherConfig{
		Logger: slog.New(slog.NewTextHandler(&logs, nil)), Registerer: prometheus.NewRegistry(),
		Notifiers: []Notifier{wn, sn, an},
	})
	require.NoError(t, err)
	require.NoError(t, d.Dispatch(t.Context(), st, []Alert{resolved, firing}))

	var hook WebhookPayload
	webhook.body(t, 0, &hook)
	require.Len(t, hook.Alerts, 2)
	require.Equal(t, wantResolved, hook.Alerts[0].Annotations["runbook_url"])
	require.Equal(t, wantFiring, hook.Alerts[1].Annotations["runbook_url"])

	var msg SlackMessage
	slack.body(t, 0, &msg)
	require.Len(t, msg.Attachments, 2)
	require.Equal(t, wantResolved, msg.Attachments[0].TitleLink)
	require.Equal(t, wantFiring, msg.Attachments[1].TitleLink)

	var amAlerts []AlertmanagerAlert
	am.body(t, 0, &amAlerts)
	require.Len(t, amAlerts, 2)
	require.Equal(t, wantResolved, amAlerts[0].Annotations["runbook_url"])
	require.Equal(t, wantFiring, amAlerts[1].Annotations["runbook_url"])

	require.Contains(t, logs.String(), "runbook_url="+wantFiring)
	require.Contains(t, logs.String(), "runbook_url="+wantResolved)

	// Nothing new: Alertmanager alone is refreshed, from the state.
	require.NoError(t, d.Dispatch(t.Context(), st, nil))
	am.body(t, 1, &amAlerts)
	require.Len(t, amAlerts, 1)
	require.Equal(t, wantFiring, amAlerts[0].Annotations["runbook_url"])
	require.Len(t, webhook.requests(), 1)
}

// TestRunbookURLDefaultAndNone: the configuration's zero value links to
// the runbook in dlq's repository; a hand-made RuleSet without a base adds
// no annotation (and Slack no link).
func TestRunbookURLDefaultAndNone(t *testing.T) {
	t.Parallel()
	rs := Config{}.RuleSet()
	require.Equal(t, RunbookBaseURLDefault, rs.RunbookBaseURL)
	_, firing, _ := runbookAlerts(t, rs.RunbookBaseURL)
	require.Equal(t, RunbookBaseURLDefault+"#rule-pending_count", firing.Annotations[AnnotationRunbookURL])
	require.Equal(t, "https://example.internal/RUNBOOK.md", Config{RunbookBaseURL: "https://example.internal/RUNBOOK.md"}.RuleSet().RunbookBaseURL)

	_, firing, resolved := runbookAlerts(t, "")
	require.NotContains(t, firing.Annotations, AnnotationRunbookURL)
	require.NotContains(t, resolved.Annotations, AnnotationRunbookURL)
	rcv := newReceiver(t)
	sn, err := NewSlackNotifier(SlackConfig{URL: rcv.URL})
	require.NoError(t, err)
	_, err = sn.Notify(t.Context(), firing)
	require.NoError(t, err)
	var raw map[string]any
	rcv.body(t, 0, &raw)
	require.NotContains(t, raw["attachments"].([]any)[0], "title_link")
}

// TestRunbookURLOfARemovedRule: an alert whose rule left the configuration
// resolves with the link it fired with, remembered in the state.
func TestRunbookURLOfARemovedRule(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("pending_count"), RunbookBaseURL: testRunbook})
	require.Len(t, s.eval(pending(t0, map[string]int64{"orders": 500})), 1)
	s.rs = RuleSet{RunbookBaseURL: "https://elsewhere.example/RUNBOOK.md"}
	notes := s.eval(pending(t0.Add(time.Minute), map[string]int64{"orders": 500}))
	require.Len(t, notes, 1)
	require.Equal(t, StatusResolved, notes[0].Status)
	require.Equal(t, testRunbook+"#rule-pending_count", notes[0].Annotations[AnnotationRunbookURL])
}

func TestRunbookAnchorPerKind(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for _, k := range Kinds() {
		a := RunbookAnchor(k)
		require.Regexp(t, `^rule-[a-z_]+$`, a)
		require.False(t, seen[a], "anchor %s used twice", a)
		seen[a] = true
	}
}

// TestRuleRunbookURL: a rule's own runbook_url (a #fragment allowed) is
// its alerts' annotation and is in the API's views of the rule and the
// alert; without one, the kind's section of the base; a bad one is refused
// naming its field.
func TestRuleRunbookURL(t *testing.T) {
	t.Parallel()
	own := "https://wiki.example/oncall/orders#backlog"
	r := rules("pending_count")[0]
	r.RunbookURL = own
	rs := RuleSet{Rules: []Rule{r, rules("depth_nonzero")[0]}, RunbookBaseURL: testRunbook}
	require.NoError(t, rs.Validate())
	st, notes := Evaluate(State{}, pending(t0, map[string]int64{"orders": 500}), rs)
	require.Len(t, notes, 1)
	require.Equal(t, own, notes[0].Annotations[AnnotationRunbookURL])
	for _, v := range st.View() {
		if v.Rule == "pending_count" {
			require.Equal(t, own, v.RunbookURL, "the alert's view carries it")
		}
	}
	views := rs.View()
	require.Equal(t, own, views[0].RunbookURL)
	require.Equal(t, testRunbook+"#rule-depth_nonzero", views[1].RunbookURL, "the default: its kind's section")

	r.RunbookURL = "wiki/orders"
	err := RuleSet{Rules: []Rule{r}}.Validate()
	require.ErrorContains(t, err, "alerts.rules[0].runbook_url: must be an absolute http:// or https:// URL")
}
