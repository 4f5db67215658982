package alerts

import (
	"cmp"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// Status is what a notification says about an alert.
type Status string

const (
	StatusFiring   Status = "firing"
	StatusResolved Status = "resolved"
)

// Label names set by dlq on every alert. Rule labels cannot replace them.
const (
	LabelAlertname   = "alertname"
	LabelSourceQueue = "source_queue"
	LabelSeverity    = "severity"
	LabelService     = "service"
	// LabelPolicy and LabelApprovalID name the subject of a per-subject
	// rule: the automatic replay policy, the approval request.
	LabelPolicy     = "policy"
	LabelApprovalID = "approval_id"
	// ServiceName is the value of the service label.
	ServiceName = "dlq"
)

// Annotation names.
const (
	AnnotationSummary     = "summary"
	AnnotationDescription = "description"
	// AnnotationRunbookURL links to the alert's section of the runbook
	// (RuleSet.RunbookBaseURL), under the name Prometheus rules and
	// Alertmanager templates use for it.
	AnnotationRunbookURL = "runbook_url"
)

func reservedLabel(k string) bool {
	switch k {
	case LabelAlertname, LabelSourceQueue, LabelSeverity, LabelService, LabelPolicy, LabelApprovalID:
		return true
	}
	return false
}

// Alert is one notification: a pair that fired, is still firing (repeat or
// refresh) or resolved. Its JSON form is what the generic webhook sends.
type Alert struct {
	Rule string `json:"rule"`
	Kind Kind   `json:"kind"`
	// SourceQueue is empty for global rules (capacity) and per-subject
	// ones.
	SourceQueue string `json:"source_queue,omitempty"`
	// Subject is the policy or approval request of a per-subject rule.
	Subject   string  `json:"subject,omitempty"`
	Status    Status  `json:"status"`
	Severity  string  `json:"severity"`
	Value     float64 `json:"value"`
	Threshold float64 `json:"threshold"`
	// StartsAt is when the alert fired. It stays the same across repeats and
	// the resolve, so receivers can tell one incident from the next.
	StartsAt time.Time `json:"starts_at"`
	// EndsAt is when it resolved; zero (omitted) while firing.
	EndsAt time.Time `json:"ends_at,omitzero"`
	// Labels hold alertname, service, severity, source_queue (when set) and
	// the rule's own labels.
	Labels map[string]string `json:"labels"`
	// Annotations hold summary and description, written for people, and
	// runbook_url when the rule set has a runbook.
	Annotations map[string]string `json:"annotations"`
}

func newAlert(a AlertState) Alert {
	status := StatusFiring
	var endsAt time.Time
	if a.Phase == PhaseResolved {
		status, endsAt = StatusResolved, a.ResolvedAt.UTC()
	}
	labels := make(map[string]string, len(a.Labels)+4)
	maps.Copy(labels, a.Labels)
	labels[LabelAlertname] = a.Rule
	labels[LabelService] = ServiceName
	labels[LabelSeverity] = a.Severity
	if a.SourceQueue != "" {
		labels[LabelSourceQueue] = a.SourceQueue
	} else {
		delete(labels, LabelSourceQueue)
	}
	switch a.Kind {
	case KindPolicyPaused:
		labels[LabelPolicy] = a.Subject
	case KindApprovalPending:
		labels[LabelApprovalID] = a.Subject
	}
	summary, description := describe(a.Kind, a.SourceQueue, status, a.Value, a.Threshold)
	if a.Kind.PerSubject() {
		summary, description = describeSubject(a.Kind, a.Subject, a.Detail, status)
	}
	annotations := map[string]string{AnnotationSummary: summary, AnnotationDescription: description}
	if a.RunbookURL != "" {
		annotations[AnnotationRunbookURL] = a.RunbookURL
	}
	return Alert{
		Rule: a.Rule, Kind: a.Kind, SourceQueue: a.SourceQueue, Subject: a.Subject, Status: status, Severity: a.Severity,
		Value: a.Value, Threshold: a.Threshold, StartsAt: a.FiredAt.UTC(), EndsAt: endsAt,
		Labels: labels, Annotations: annotations,
	}
}

// describe writes the summary and description. They are plain sentences
// because they end up in Slack, pager apps and e-mails.
func describe(k Kind, queue string, status Status, value, threshold float64) (summary, description string) {
	v, t := formatValue(k, value), formatValue(k, threshold)
	q := strconv.Quote(queue)
	if status == StatusResolved {
		switch k {
		case KindCapacity:
			return "Dead-letter store back under capacity threshold",
				fmt.Sprintf("The dead-letter store is at %s of its capacity, at or below the threshold of %s.", v, t)
		case KindOldestPendingAge:
			return fmt.Sprintf("Oldest pending dead message from %s back under %s", q, t),
				fmt.Sprintf("The oldest pending dead message from source queue %s is now %s old, at or below the threshold of %s.", q, v, t)
		default:
			return fmt.Sprintf("%s back to normal for source queue %s", kindTitle(k), q),
				fmt.Sprintf("%s for source queue %s is now %s, at or below the threshold of %s.", kindTitle(k), q, v, t)
		}
	}
	switch k {
	case KindPendingCount:
		return fmt.Sprintf("%s dead messages pending from %s", v, q),
			fmt.Sprintf("%s dead messages from source queue %s are pending, above the threshold of %s. Inspect them with GET /api/v1/messages?source_queue=%s, then replay, acknowledge or delete them.", v, q, t, queue)
	case KindOldestPendingAge:
		return fmt.Sprintf("Oldest pending dead message from %s is %s old", q, v),
			fmt.Sprintf("A dead message from source queue %s has been pending for %s, longer than %s. Nobody has replayed, acknowledged or deleted it.", q, v, t)
	case KindDepthNonzero:
		return fmt.Sprintf("Dead messages pending from %s", q),
			fmt.Sprintf("%s dead messages from source queue %s are pending (threshold %s) and have been for the rule's hold time.", v, q, t)
	case KindRepeatFailures:
		return fmt.Sprintf("%s dead messages from %s keep failing after replay", v, q),
			fmt.Sprintf("%s pending messages from source queue %s were replayed more than %d times and died again; replaying them once more will not help (threshold %s).", v, q, RepeatFailureReplays, t)
	case KindIngestSpike:
		// The value is a count that stops one past the largest threshold
		// (RuleSet.CountLimit): "at least", never more than was counted.
		return fmt.Sprintf("At least %s new dead messages from %s in 5 minutes", v, q),
			fmt.Sprintf("At least %s messages from source queue %s were dead-lettered in the last 5 minutes, above the threshold of %s (dlq stops counting one past its largest ingest_spike threshold; the rate is dlq_messages_ingested_total{source_queue}). A consumer is probably failing.", v, q, t)
	case KindAutoExhausted:
		return fmt.Sprintf("%s dead messages from %s parked after automatic replays", v, q),
			fmt.Sprintf("%s pending messages from source queue %s were replayed by an automatic replay policy as often as it may and died again each time; they wait for a human (filter: auto_exhausted in GET /api/v1/messages/{id}; threshold %s).", v, q, t)
	case KindCapacity:
		return fmt.Sprintf("Dead-letter store at %s of capacity", v),
			fmt.Sprintf("The dead-letter store is at %s of its configured capacity, above the threshold of %s. When it is full, the capacity policy evicts or refuses; see the cleanup settings.", v, t)
	}
	return fmt.Sprintf("%s is %s", k, v), fmt.Sprintf("%s for %s is %s, above %s.", k, q, v, t)
}

func kindTitle(k Kind) string {
	switch k {
	case KindPendingCount:
		return "Pending dead messages"
	case KindDepthNonzero:
		return "Dead-letter depth"
	case KindRepeatFailures:
		return "Repeat failures"
	case KindIngestSpike:
		return "Dead-letter rate"
	case KindAutoExhausted:
		return "Messages parked after automatic replays"
	}
	return string(k)
}

// describeSubject writes the summary and description of a per-subject
// alert.
func describeSubject(k Kind, subj, detail string, status Status) (summary, description string) {
	switch k {
	case KindPolicyPaused:
		if status == StatusResolved {
			return fmt.Sprintf("Automatic replay policy %s resumed", subj),
				fmt.Sprintf("The automatic replay policy %s runs again.", subj)
		}
		return fmt.Sprintf("Automatic replay policy %s paused", subj),
			fmt.Sprintf("The automatic replay policy %s is paused (%s) and replays nothing until resumed: POST /api/v1/policies/%s/resume, or dlq policy resume %s.", subj, detail, subj, subj)
	case KindApprovalPending:
		if status == StatusResolved {
			return fmt.Sprintf("Approval request %s decided or expired", subj),
				fmt.Sprintf("Approval request %s no longer waits.", subj)
		}
		return fmt.Sprintf("Approval request %s waits for a second person", subj),
			fmt.Sprintf("A bulk action waits for approval: %s. Approve it with POST /api/v1/approvals/%s/approve (or dlq approve %s), or reject it; the requester cannot.", detail, subj, subj)
	}
	return fmt.Sprintf("%s %s", k, subj), detail
}

func formatValue(k Kind, v float64) string {
	switch k {
	case KindOldestPendingAge:
		return time.Duration(v * float64(time.Second)).Round(time.Second).String()
	case KindCapacity:
		return strconv.FormatFloat(v, 'f', 1, 64) + "%"
	}
	return strconv.FormatFloat(v, 'f', -1, 64)
}

func sortAlerts(s []Alert) {
	// Stable: a fire kept from an undelivered notification stays before
	// its resolve.
	slices.SortStableFunc(s, func(a, b Alert) int {
		return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.SourceQueue, b.SourceQueue), cmp.Compare(a.Subject, b.Subject))
	})
}
