package alerts

import (
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestApprovalPendingPerRequest: every new request is notified once when
// it is made and once when it leaves the pending set (decided or
// expired), a second request while the first waits included.
func TestApprovalPendingPerRequest(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("approval_pending"), RunbookBaseURL: testRunbook})
	req := func(id int64, count int64) ApprovalStats {
		return ApprovalStats{ID: id, Action: "delete", Count: count, RequestedBy: "jane", ExpiresAt: t0.Add(24 * time.Hour)}
	}
	notes := s.eval(Snapshot{At: t0, Approvals: []ApprovalStats{req(7, 12840)}})
	require.Len(t, notes, 1)
	a := notes[0]
	require.Equal(t, StatusFiring, a.Status)
	require.Equal(t, "7", a.Subject)
	require.Equal(t, "7", a.Labels[LabelApprovalID])
	require.NotContains(t, a.Labels, LabelSourceQueue)
	require.Equal(t, 12840.0, a.Value)
	require.Contains(t, a.Annotations[AnnotationDescription], "delete of 12840 messages requested by jane")
	require.Contains(t, a.Annotations[AnnotationDescription], "/api/v1/approvals/7/approve")
	require.Equal(t, testRunbook+"#rule-approval_pending", a.Annotations[AnnotationRunbookURL])

	// Still pending: nothing more. A second request: its own notification.
	require.Empty(t, s.eval(Snapshot{At: t0.Add(time.Minute), Approvals: []ApprovalStats{req(7, 12840)}}))
	notes = s.eval(Snapshot{At: t0.Add(2 * time.Minute), Approvals: []ApprovalStats{req(7, 12840), req(8, 20000)}})
	require.Len(t, notes, 1)
	require.Equal(t, "8", notes[0].Subject)
	require.Equal(t, StatusFiring, notes[0].Status)

	// 7 approved, 8 expired: both resolve, 7 first.
	notes = s.eval(Snapshot{At: t0.Add(3 * time.Minute), Approvals: []ApprovalStats{req(8, 20000)}})
	require.Len(t, notes, 1)
	require.Equal(t, "7", notes[0].Subject)
	require.Equal(t, StatusResolved, notes[0].Status)
	require.Equal(t, t0, notes[0].StartsAt)
	notes = s.eval(Snapshot{At: t0.Add(4 * time.Minute)})
	require.Len(t, notes, 1)
	require.Equal(t, "8", notes[0].Subject)
	require.Equal(t, StatusResolved, notes[0].Status)
	require.Empty(t, s.eval(Snapshot{At: t0.Add(5 * time.Minute)}))
	require.Empty(t, s.state.Alerts)
}

// TestPolicyPausedPerPolicy: a policy's pause fires with its reason and
// resolves when it is resumed or removed; other policies are apart.
func TestPolicyPausedPerPolicy(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("policy_paused")})
	snap := func(at time.Duration, ps ...PolicyStats) Snapshot { return Snapshot{At: t0.Add(at), Policies: ps} }
	require.Empty(t, s.eval(snap(0, PolicyStats{Name: "orders-timeouts"}, PolicyStats{Name: "billing"})))
	notes := s.eval(snap(time.Minute, PolicyStats{Name: "orders-timeouts", Paused: true, Reason: "the canary of replay task 12 died again"},
		PolicyStats{Name: "billing"}))
	require.Len(t, notes, 1)
	require.Equal(t, "orders-timeouts", notes[0].Labels[LabelPolicy])
	require.Equal(t, StatusFiring, notes[0].Status)
	require.True(t, strings.Contains(notes[0].Annotations[AnnotationDescription], "the canary of replay task 12 died again"))
	require.Contains(t, notes[0].Annotations[AnnotationSummary], "paused")

	notes = s.eval(snap(2*time.Minute, PolicyStats{Name: "orders-timeouts"}, PolicyStats{Name: "billing", Paused: true, Reason: "paused by jane"}))
	require.Len(t, notes, 2)
	require.Equal(t, "billing", notes[0].Subject)
	require.Equal(t, StatusFiring, notes[0].Status)
	require.Equal(t, "orders-timeouts", notes[1].Subject)
	require.Equal(t, StatusResolved, notes[1].Status)

	// billing leaves the configuration while paused: it resolves.
	notes = s.eval(snap(3*time.Minute, PolicyStats{Name: "orders-timeouts"}))
	require.Len(t, notes, 1)
	require.Equal(t, "billing", notes[0].Subject)
	require.Equal(t, StatusResolved, notes[0].Status)
}

// TestAutoExhaustedPerQueue: parked messages alert per source queue, like
// the other queue rules, and take overrides; the per-subject kinds do not.
func TestAutoExhaustedPerQueue(t *testing.T) {
	t.Parallel()
	s := newSim(t, RuleSet{Rules: rules("auto_exhausted")})
	notes := s.eval(Snapshot{At: t0, Queues: []QueueStats{{SourceQueue: "orders", Pending: 10, AutoExhausted: 3}, {SourceQueue: "billing", Pending: 4}}})
	require.Len(t, notes, 1)
	require.Equal(t, "orders", notes[0].SourceQueue)
	require.Equal(t, 3.0, notes[0].Value)
	require.Contains(t, notes[0].Annotations[AnnotationSummary], "parked")

	bad := RuleSet{Rules: DefaultRules(), Overrides: Overrides{"orders": {
		"approval_pending": {Disabled: new(true)}, "auto_exhausted": {Threshold: new(5.0)}}}}
	err := bad.Validate()
	require.Error(t, err)
	require.Contains(t, err.Error(), `alerts.overrides.orders.approval_pending: rule "approval_pending" is of kind approval_pending, which is evaluated per policy or request`)
	require.NotContains(t, err.Error(), "auto_exhausted")
}
