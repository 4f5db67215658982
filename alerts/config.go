package alerts

import (
	"cmp"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"time"
)

// Config is the alerts section of the configuration file (YAML keys are the
// snake_case tags). The zero Config means: the default rules, no overrides,
// repeat every RepeatIntervalDefault, and only the log as receiver.
//
//	alerts:
//	  repeat_interval: 4h
//	  rules:                       # omit for DefaultRules(); a list replaces them all
//	    - name: pending_count
//	      kind: pending_count
//	      threshold: 100
//	      severity: warning
//	    - name: depth_nonzero
//	      kind: depth_nonzero
//	      threshold: 0
//	      for: 5m
//	  overrides:                   # source queue -> rule name -> override
//	    orders:
//	      pending_count: {threshold: 1000}
//	      depth_nonzero: {disabled: true}
//	  runbook_base_url: https://docs.example.internal/dlq/RUNBOOK.md
//	  webhooks:
//	    - url: https://hooks.example.internal/dlq
//	      headers: {Authorization: "Bearer ..."}
//	  slack:
//	    - url: https://hooks.slack.com/services/...
//	  alertmanagers:
//	    - url: http://alertmanager:9093
//	      generator_url: http://dlq:8080/api/v1/alerts
type Config struct {
	// RepeatInterval re-notifies a still-firing alert after this long. 0
	// never repeats. Optional, default RepeatIntervalDefault when absent.
	RepeatInterval *time.Duration `yaml:"repeat_interval"`
	// Rules replace DefaultRules when given (even as an empty list, which
	// turns every rule off). Optional.
	Rules []Rule `yaml:"rules"`
	// Overrides change rules per source queue. Optional.
	Overrides Overrides `yaml:"overrides"`
	// RunbookBaseURL is the address of docs/RUNBOOK.md as on-call engineers
	// reach it; each alert's runbook_url points at its section there.
	// Optional, default RunbookBaseURLDefault.
	RunbookBaseURL string `yaml:"runbook_base_url"`
	// Webhooks, Slack and Alertmanagers are the receivers besides the log.
	// Optional.
	Webhooks      []WebhookConfig      `yaml:"webhooks"`
	Slack         []SlackConfig        `yaml:"slack"`
	Alertmanagers []AlertmanagerConfig `yaml:"alertmanagers"`
}

// RuleSet returns the rules Evaluate should run, defaults filled in. Call
// Validate first.
func (c Config) RuleSet() RuleSet {
	rs := RuleSet{
		Rules: DefaultRules(), Overrides: c.Overrides, RepeatInterval: RepeatIntervalDefault,
		RunbookBaseURL: cmp.Or(c.RunbookBaseURL, RunbookBaseURLDefault),
	}
	if c.Rules != nil {
		rs.Rules = make([]Rule, len(c.Rules))
		for i, r := range c.Rules {
			r.Severity = severityOf(r)
			rs.Rules[i] = r
		}
	}
	if c.RepeatInterval != nil {
		rs.RepeatInterval = *c.RepeatInterval
	}
	return rs
}

// Validate checks the section and reports every problem (joined), each
// naming its field as written in YAML, e.g. "alerts.rules[2].for: must be
// >= 0" or "alerts.slack[0].url: required".
func (c Config) Validate() error {
	errs := []error{c.RuleSet().Validate()}
	names := map[string]string{"log": "the built-in log notifier"}
	name := func(field, n string) {
		if prev, ok := names[n]; ok {
			errs = append(errs, fmt.Errorf("alerts.%s.name: %q is already used by %s; give each receiver its own name", field, n, prev))
			return
		}
		names[n] = "alerts." + field
	}
	for i, w := range c.Webhooks {
		f := fmt.Sprintf("webhooks[%d]", i)
		if err := w.validate(); err != nil {
			errs = append(errs, fmt.Errorf("alerts.%s.%w", f, err))
		}
		name(f, receiverName(w.Name, "webhook", i))
	}
	for i, s := range c.Slack {
		f := fmt.Sprintf("slack[%d]", i)
		if err := s.validate(); err != nil {
			errs = append(errs, fmt.Errorf("alerts.%s.%w", f, err))
		}
		name(f, receiverName(s.Name, "slack", i))
	}
	for i, a := range c.Alertmanagers {
		f := fmt.Sprintf("alertmanagers[%d]", i)
		if err := a.validate(); err != nil {
			errs = append(errs, fmt.Errorf("alerts.%s.%w", f, err))
		}
		name(f, receiverName(a.Name, "alertmanager", i))
	}
	return errors.Join(errs...)
}

// receiverName is the notifier name when the configuration gives none: the
// type for the first of its kind, then type_2, type_3...
func receiverName(name, kind string, i int) string {
	switch {
	case name != "":
		return name
	case i == 0:
		return kind
	}
	return fmt.Sprintf("%s_%d", kind, i+1)
}

// NotifierDeps are what a YAML file cannot hold.
type NotifierDeps struct {
	// Client is used by every receiver. Optional, default one client per
	// receiver with its timeout.
	Client *http.Client
	// EvalInterval is the alert check's schedule, used for Alertmanager
	// receivers without eval_interval. Optional.
	EvalInterval time.Duration
	// Now is the clock for Alertmanager endsAt. Optional, default time.Now.
	Now func() time.Time
}

// Notifiers builds the configured receivers, in the order webhooks, slack,
// alertmanagers. The log notifier is not included: the Dispatcher always
// adds it.
func (c Config) Notifiers(deps NotifierDeps) ([]Notifier, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	var out []Notifier
	for i, w := range c.Webhooks {
		w.Name = receiverName(w.Name, "webhook", i)
		if w.Client == nil {
			w.Client = deps.Client
		}
		n, err := NewWebhookNotifier(w)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	for i, s := range c.Slack {
		s.Name = receiverName(s.Name, "slack", i)
		if s.Client == nil {
			s.Client = deps.Client
		}
		n, err := NewSlackNotifier(s)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	for i, a := range c.Alertmanagers {
		a.Name = receiverName(a.Name, "alertmanager", i)
		if a.Client == nil {
			a.Client = deps.Client
		}
		if a.EvalInterval == 0 {
			a.EvalInterval = deps.EvalInterval
		}
		if a.Now == nil {
			a.Now = deps.Now
		}
		n, err := NewAlertmanagerNotifier(a)
		if err != nil {
			return nil, err
		}
		out = append(out, n)
	}
	return slices.Clip(out), nil
}
