package alerts

import (
	"cmp"
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"
)

// Kind says what a rule measures. Every kind compares one number against the
// rule's Threshold with a strict "greater than".
type Kind string

const (
	// KindPendingCount measures QueueStats.Pending (messages).
	KindPendingCount Kind = "pending_count"
	// KindOldestPendingAge measures QueueStats.OldestPending in seconds, so
	// its Threshold is in seconds too (86400 is one day).
	KindOldestPendingAge Kind = "oldest_pending_age"
	// KindDepthNonzero measures QueueStats.Pending like KindPendingCount; it
	// exists separately so "anything at all, for a while" and "a backlog" can
	// carry different thresholds, durations and severities.
	KindDepthNonzero Kind = "depth_nonzero"
	// KindRepeatFailures measures QueueStats.RepeatFailures: pending messages
	// whose replay_count exceeds RepeatFailureReplays.
	KindRepeatFailures Kind = "repeat_failures"
	// KindIngestSpike measures QueueStats.NewLast5m (messages).
	KindIngestSpike Kind = "ingest_spike"
	// KindCapacity measures the used share of the store's capacity in percent
	// (0-100), the larger of messages and bytes. It is global: it has no source
	// queue and cannot be overridden per queue.
	KindCapacity Kind = "capacity"
	// KindAutoExhausted measures QueueStats.AutoExhausted: pending messages
	// the automatic replay policies tried as often as they may and that
	// died again (parked for a human).
	KindAutoExhausted Kind = "auto_exhausted"
	// KindPolicyPaused is evaluated once per automatic replay policy
	// (Snapshot.Policies): 1 while it is paused, 0 otherwise.
	KindPolicyPaused Kind = "policy_paused"
	// KindApprovalPending is evaluated once per request waiting for
	// approval (Snapshot.Approvals): the number of messages it would
	// touch. It fires when a request is made and resolves when it is
	// decided or expires, so receivers hear of every new request.
	KindApprovalPending Kind = "approval_pending"
)

// Kinds lists every kind in a stable order.
func Kinds() []Kind {
	return []Kind{KindPendingCount, KindOldestPendingAge, KindDepthNonzero, KindRepeatFailures, KindIngestSpike, KindCapacity,
		KindAutoExhausted, KindPolicyPaused, KindApprovalPending}
}

// Valid reports whether k is a known kind.
func (k Kind) Valid() bool { return slices.Contains(Kinds(), k) }

// Global reports whether rules of this kind are evaluated once for the whole
// store instead of once per source queue.
func (k Kind) Global() bool { return k == KindCapacity }

// PerSubject reports whether rules of this kind are evaluated once per
// subject of their own (a policy, an approval request) rather than per
// source queue; like global ones, they cannot be overridden per queue.
func (k Kind) PerSubject() bool { return k == KindPolicyPaused || k == KindApprovalPending }

// perQueue reports whether rules of this kind are evaluated per source
// queue, and so take per-queue overrides.
func (k Kind) perQueue() bool { return !k.Global() && !k.PerSubject() }

// RepeatFailureReplays is the replay_count a pending message must exceed to
// count in QueueStats.RepeatFailures. The snapshot source applies it (the
// store owns the query); it is a constant so the rule text and the query
// cannot disagree.
const RepeatFailureReplays = 2

// Severities used by the default rules. Any non-empty string is accepted; it
// becomes the "severity" label receivers route on.
const (
	SeverityWarning  = "warning"
	SeverityCritical = "critical"
)

// RepeatIntervalDefault is how often a still-firing alert is notified again
// when the configuration does not say.
const RepeatIntervalDefault = 4 * time.Hour

// Rule is one threshold check. The condition is "value > Threshold"; it must
// hold for For before the alert fires.
type Rule struct {
	// Name identifies the rule: the alertname label, the key of overrides and
	// of dlq_alerts_firing{rule}. Required, unique.
	Name string `yaml:"name"`
	// Kind is what the rule measures. Required.
	Kind Kind `yaml:"kind"`
	// Threshold is the value the measurement must exceed, in the kind's unit
	// (messages, seconds, or percent for capacity). Must be >= 0.
	Threshold float64 `yaml:"threshold"`
	// For is how long the condition must hold before the alert fires; 0 fires
	// on the first evaluation that sees it. Must be >= 0.
	For time.Duration `yaml:"for"`
	// Severity becomes the severity label. Optional, default "warning".
	Severity string `yaml:"severity"`
	// Disabled turns the rule off everywhere unless a queue override turns it
	// back on. Optional.
	Disabled bool `yaml:"disabled"`
	// Labels are added to every alert of the rule (routing keys for receivers
	// such as team or runbook). They cannot replace alertname, service,
	// severity or source_queue. Optional.
	Labels map[string]string `yaml:"labels"`
	// RunbookURL is the runbook of this rule's alerts (an absolute http(s)
	// URL, a #fragment allowed): their runbook_url annotation, and the
	// link the console shows beside a firing alert. Optional; default the
	// rule kind's section of the rule set's runbook (RunbookBaseURL).
	RunbookURL string `yaml:"runbook_url"`
}

// DefaultRules returns the built-in rules: the thresholds operators asked for
// most often. Each call returns a fresh slice the caller may change.
func DefaultRules() []Rule {
	return []Rule{
		{Name: "pending_count", Kind: KindPendingCount, Threshold: 100, Severity: SeverityWarning},
		{Name: "oldest_pending_age", Kind: KindOldestPendingAge, Threshold: (24 * time.Hour).Seconds(), Severity: SeverityWarning},
		{Name: "depth_nonzero", Kind: KindDepthNonzero, Threshold: 0, For: 5 * time.Minute, Severity: SeverityWarning},
		{Name: "repeat_failures", Kind: KindRepeatFailures, Threshold: 0, Severity: SeverityWarning},
		{Name: "ingest_spike", Kind: KindIngestSpike, Threshold: 1000, Severity: SeverityWarning},
		{Name: "capacity", Kind: KindCapacity, Threshold: 90, Severity: SeverityCritical},
		{Name: "auto_exhausted", Kind: KindAutoExhausted, Threshold: 0, Severity: SeverityWarning},
		{Name: "policy_paused", Kind: KindPolicyPaused, Threshold: 0, Severity: SeverityWarning},
		{Name: "approval_pending", Kind: KindApprovalPending, Threshold: 0, Severity: SeverityWarning},
	}
}

// RuleOverride changes one rule for one source queue. A nil field keeps the
// rule's own value, so an override only has to say what differs.
type RuleOverride struct {
	// Threshold replaces Rule.Threshold. Optional.
	Threshold *float64 `yaml:"threshold"`
	// For replaces Rule.For. Optional.
	For *time.Duration `yaml:"for"`
	// Disabled replaces Rule.Disabled: true silences the rule for the queue,
	// false enables a rule that is disabled globally. Optional.
	Disabled *bool `yaml:"disabled"`
}

// Overrides maps a source queue name to rule names to the override for that
// pair. In YAML:
//
//	overrides:
//	  orders:                 # source queue
//	    pending_count:        # rule name
//	      threshold: 1000
//	    depth_nonzero:
//	      disabled: true
type Overrides map[string]map[string]RuleOverride

// RuleSet is everything Evaluate needs besides state and snapshot. Build it
// with Config.RuleSet or DefaultRuleSet; check hand-made ones with Validate.
type RuleSet struct {
	Rules     []Rule
	Overrides Overrides
	// RepeatInterval re-notifies a still-firing alert after this long since
	// its last notification. 0 never re-notifies (only fire and resolve).
	RepeatInterval time.Duration
	// RunbookBaseURL is the address of docs/RUNBOOK.md; every alert carries
	// the annotation runbook_url, RunbookBaseURL#RunbookAnchor(kind).
	// Optional: empty adds no runbook_url.
	RunbookBaseURL string
}

// DefaultRuleSet returns DefaultRules with the default repeat interval, the
// default runbook and no overrides.
func DefaultRuleSet() RuleSet {
	return RuleSet{Rules: DefaultRules(), RepeatInterval: RepeatIntervalDefault, RunbookBaseURL: RunbookBaseURLDefault}
}

// effective applies the override for queue, if any, to r.
func (rs RuleSet) effective(r Rule, queue string) Rule {
	o, ok := rs.Overrides[queue][r.Name]
	if !ok || !r.Kind.perQueue() {
		return r
	}
	if o.Threshold != nil {
		r.Threshold = *o.Threshold
	}
	if o.For != nil {
		r.For = *o.For
	}
	if o.Disabled != nil {
		r.Disabled = *o.Disabled
	}
	return r
}

// Validate checks the rule set. Every problem is reported (joined), each
// naming its field the way it is written in YAML, e.g.
// "alerts.rules[2].for: must be >= 0".
func (rs RuleSet) Validate() error {
	var errs []error
	bad := func(field, format string, a ...any) {
		errs = append(errs, fmt.Errorf("alerts.%s: %s", field, fmt.Sprintf(format, a...)))
	}
	if rs.RepeatInterval < 0 {
		bad("repeat_interval", "must be >= 0 (0 never repeats), got %s", rs.RepeatInterval)
	}
	if rs.RunbookBaseURL != "" {
		if err := checkRunbookBaseURL(rs.RunbookBaseURL); err != nil {
			bad("runbook_base_url", "%v", err)
		}
	}
	byName := make(map[string]Rule, len(rs.Rules))
	for i, r := range rs.Rules {
		f := fmt.Sprintf("rules[%d]", i)
		switch {
		case r.Name == "":
			bad(f+".name", "required")
		case byName[r.Name].Name != "":
			bad(f+".name", "%q is used by an earlier rule; names must be unique", r.Name)
		default:
			byName[r.Name] = r
		}
		if !r.Kind.Valid() {
			bad(f+".kind", "%q is not one of %v", r.Kind, Kinds())
		}
		if err := checkThreshold(r.Kind, r.Threshold); err != nil {
			bad(f+".threshold", "%v", err)
		}
		if r.For < 0 {
			bad(f+".for", "must be >= 0, got %s", r.For)
		}
		if r.RunbookURL != "" {
			if err := checkRunbookURL(r.RunbookURL); err != nil {
				bad(f+".runbook_url", "%v", err)
			}
		}
		for _, k := range slices.Sorted(maps.Keys(r.Labels)) {
			if reservedLabel(k) {
				bad(f+".labels."+k, "is set by dlq and cannot be configured")
			}
		}
	}
	for _, queue := range slices.Sorted(maps.Keys(rs.Overrides)) {
		if queue == "" {
			bad("overrides", "a source queue name must not be empty")
			continue
		}
		perRule := rs.Overrides[queue]
		for _, name := range slices.Sorted(maps.Keys(perRule)) {
			f := fmt.Sprintf("overrides.%s.%s", queue, name)
			r, ok := byName[name]
			if !ok {
				bad(f, "no rule is named %q", name)
				continue
			}
			if r.Kind.Global() {
				bad(f, "rule %q is of kind %s, which is global and cannot be overridden per queue", name, r.Kind)
				continue
			}
			if r.Kind.PerSubject() {
				bad(f, "rule %q is of kind %s, which is evaluated per policy or request and cannot be overridden per queue", name, r.Kind)
				continue
			}
			o := perRule[name]
			if o.Threshold != nil {
				if err := checkThreshold(r.Kind, *o.Threshold); err != nil {
					bad(f+".threshold", "%v", err)
				}
			}
			if o.For != nil && *o.For < 0 {
				bad(f+".for", "must be >= 0, got %s", *o.For)
			}
		}
	}
	return errors.Join(errs...)
}

func checkThreshold(k Kind, v float64) error {
	switch {
	case v != v: // NaN would make every comparison false, silently.
		return errors.New("must be a number")
	case v < 0:
		return fmt.Errorf("must be >= 0, got %v", v)
	case k == KindCapacity && v >= 100:
		return fmt.Errorf("is a percentage and must be below 100, got %v", v)
	}
	return nil
}

func severityOf(r Rule) string { return cmp.Or(r.Severity, SeverityWarning) }

// RuleView is a rule as the HTTP API shows it.
type RuleView struct {
	Name       string  `json:"name"`
	Kind       Kind    `json:"kind"`
	Threshold  float64 `json:"threshold"`
	ForSeconds float64 `json:"for_seconds"`
	Severity   string  `json:"severity"`
	Disabled   bool    `json:"disabled"`
	// RunbookURL is where its alerts' runbook_url points ("" without a
	// runbook).
	RunbookURL string `json:"runbook_url,omitempty"`
	// Overrides holds, per source queue, the rule as it applies there.
	Overrides map[string]RuleOverrideView `json:"overrides,omitempty"`
}

// RuleOverrideView is the effective rule for one source queue.
type RuleOverrideView struct {
	Threshold  float64 `json:"threshold"`
	ForSeconds float64 `json:"for_seconds"`
	Disabled   bool    `json:"disabled"`
}

// View returns the rules, with per-queue overrides applied, for the API.
func (rs RuleSet) View() []RuleView {
	out := make([]RuleView, 0, len(rs.Rules))
	for _, r := range rs.Rules {
		v := RuleView{
			Name: r.Name, Kind: r.Kind, Threshold: r.Threshold, ForSeconds: r.For.Seconds(),
			Severity: severityOf(r), Disabled: r.Disabled, RunbookURL: rs.runbookOf(r),
		}
		for queue, perRule := range rs.Overrides {
			if _, ok := perRule[r.Name]; !ok || !r.Kind.perQueue() {
				continue
			}
			e := rs.effective(r, queue)
			if v.Overrides == nil {
				v.Overrides = map[string]RuleOverrideView{}
			}
			v.Overrides[queue] = RuleOverrideView{Threshold: e.Threshold, ForSeconds: e.For.Seconds(), Disabled: e.Disabled}
		}
		out = append(out, v)
	}
	return out
}
