package config

import (
	"fmt"
	"math"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/category"
)

// Recovery configures recovery beyond manual replay: failure categories
// and automatic replay policies (docs/REPLAY.md, "Recovery").
//
//	recovery:
//	  categories:
//	    default_rules: true      # the built-in rules, after yours
//	    rules: []                # ordered; the first that matches decides
//	  policies: []               # see Policy
type Recovery struct {
	Categories Categories `yaml:"categories"`
	// Policies replay matching messages automatically, in order of the
	// list. Evaluated by the cron job policies (cron.policies,
	// DLQ_CRON_POLICIES).
	Policies []Policy `yaml:"policies"`
}

// Categories configures the failure category rules.
type Categories struct {
	// DefaultRules adds the built-in rules (category.DefaultRules) after
	// Rules. Env DLQ_CATEGORY_DEFAULT_RULES.
	DefaultRules bool `yaml:"default_rules"`
	// Rules come first, in order; the first rule a message meets gives its
	// category.
	Rules []category.Rule `yaml:"rules"`
}

// Policy is one automatic replay policy. A message is replayed by it when
// it is pending, its source queue, category, reason and failure group are
// among those the policy names (an empty list names all; categories
// defaults to transient), and its next attempt is due: first_delay after
// it failed, then each delay backoff_factor times the last, at most
// max_delay, give or take jitter. After max_attempts attempts a message
// that dies again is parked: it stays pending, flagged auto_exhausted.
//
//   - name: orders-timeouts
//     queues: [orders]
//     categories: [transient]
//     reasons: []
//     groups: []
//     first_delay: 1m
//     backoff_factor: 5
//     max_delay: 1h
//     jitter: 0.1
//     max_attempts: 3
//     rate_per_second: 200
//     canary: {count: 5, wait_seconds: 60}
//     on_unknown: retry
//     dry_run: false
type Policy struct {
	Name       string   `yaml:"name"`
	Queues     []string `yaml:"queues"`
	Categories []string `yaml:"categories"`
	Reasons    []string `yaml:"reasons"`
	Groups     []string `yaml:"groups"`
	// FirstDelay is how long after a message failed its first attempt is
	// due. Default 1m.
	FirstDelay Duration `yaml:"first_delay"`
	// BackoffFactor multiplies the delay after each attempt (1: the same
	// delay every time). Default 2.
	BackoffFactor float64 `yaml:"backoff_factor"`
	// MaxDelay caps the delay. Default 1h.
	MaxDelay Duration `yaml:"max_delay"`
	// Jitter spreads each delay by up to this fraction either way (0 to
	// 1), the same for a message and attempt on every instance. Default 0.
	Jitter float64 `yaml:"jitter"`
	// MaxAttempts is how many times the policy replays a message. Default 3.
	MaxAttempts int `yaml:"max_attempts"`
	// RatePerSecond throttles each attempt's replay task; 0 is as fast as
	// confirms allow.
	RatePerSecond float64 `yaml:"rate_per_second"`
	// Canary, when set, publishes the first count messages of each
	// attempt and waits wait_seconds: if one of them dies again, the
	// attempt stops and the policy pauses itself.
	Canary *PolicyCanary `yaml:"canary"`
	// OnUnknown is what each attempt's task does with a publish whose
	// outcome is unknown: retry (send it again) or hold (never), as a
	// replay request's on_unknown. Default replay.on_unknown.
	OnUnknown string `yaml:"on_unknown"`
	// DryRun only reports what the policy would replay (GET
	// /api/v1/policies) and replays nothing.
	DryRun bool `yaml:"dry_run"`
}

// PolicyCanary is a policy's canary.
type PolicyCanary struct {
	Count       int `yaml:"count"`
	WaitSeconds int `yaml:"wait_seconds"`
}

// Policy defaults.
const (
	PolicyFirstDelayDefault    = time.Minute
	PolicyBackoffFactorDefault = 2.0
	PolicyMaxDelayDefault      = time.Hour
	PolicyMaxAttemptsDefault   = 3
)

// PolicyCategoriesDefault are the categories of a policy that names none:
// a permanent failure is never replayed unless a policy says so.
var PolicyCategoriesDefault = []string{category.Transient}

func defaultRecovery() Recovery {
	return Recovery{Categories: Categories{DefaultRules: true}}
}

// WithDefaults returns p with its unset fields at their defaults.
func (p Policy) WithDefaults() Policy {
	if len(p.Categories) == 0 {
		p.Categories = slices.Clone(PolicyCategoriesDefault)
	}
	if p.FirstDelay == 0 {
		p.FirstDelay = Duration(PolicyFirstDelayDefault)
	}
	if p.BackoffFactor == 0 {
		p.BackoffFactor = PolicyBackoffFactorDefault
	}
	if p.MaxDelay == 0 {
		p.MaxDelay = Duration(max(PolicyMaxDelayDefault, p.FirstDelay.D()))
	}
	if p.MaxAttempts == 0 {
		p.MaxAttempts = PolicyMaxAttemptsDefault
	}
	return p
}

// CategoryRules compiles the category rules (Validate has checked them).
func (c *Config) CategoryRules() (*category.Rules, error) {
	rs, err := category.New(c.Recovery.Categories.Rules, c.Recovery.Categories.DefaultRules)
	if err != nil {
		return nil, fmt.Errorf("config: recovery.categories.%w", err)
	}
	return rs, nil
}

func recoveryEnvVars() []envVar {
	return []envVar{
		{"DLQ_CATEGORY_DEFAULT_RULES", replayBoolVar("recovery.categories.default_rules", "DLQ_CATEGORY_DEFAULT_RULES",
			func(c *Config) *bool { return &c.Recovery.Categories.DefaultRules })},
	}
}

// policyName is what a policy may be called: it appears in URLs, actor
// names (policy:<name>) and metric labels.
var policyName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`)

// validateRecovery checks the recovery section.
func (c *Config) validateRecovery() []error {
	var errs []error
	bad := func(format string, a ...any) { errs = append(errs, fmt.Errorf("config: "+format, a...)) }
	if _, err := category.New(c.Recovery.Categories.Rules, c.Recovery.Categories.DefaultRules); err != nil {
		for _, e := range strings.Split(err.Error(), "\n") {
			bad("recovery.categories.%s", e)
		}
	}
	names := map[string]bool{}
	for i, p := range c.Recovery.Policies {
		f := fmt.Sprintf("recovery.policies[%d]", i)
		switch {
		case !policyName.MatchString(p.Name):
			bad("%s.name %q must be 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit", f, p.Name)
		case names[p.Name]:
			bad("%s.name %q is used by an earlier policy; names must be unique", f, p.Name)
		}
		names[p.Name] = true
		for j, cat := range p.Categories {
			if !category.Valid(cat) {
				bad("%s.categories[%d] %q must be one of transient, permanent, unknown", f, j, cat)
			}
		}
		for j, q := range p.Queues {
			if q == "" {
				bad("%s.queues[%d] must not be empty", f, j)
			}
		}
		for j, r := range p.Reasons {
			if r == "" {
				bad("%s.reasons[%d] must not be empty", f, j)
			}
		}
		for j, g := range p.Groups {
			if u, err := strconv.ParseUint(g, 16, 64); len(g) != 16 || err != nil || u == 0 {
				bad("%s.groups[%d] %q must be a failure group id: 16 hex digits (see GET /api/v1/groups)", f, j, g)
			}
		}
		d := p.WithDefaults()
		if d.FirstDelay < 0 {
			bad("%s.first_delay %s must be >= 0", f, d.FirstDelay.D())
		}
		if math.IsNaN(d.BackoffFactor) || d.BackoffFactor < 1 || d.BackoffFactor > 100 {
			bad("%s.backoff_factor %v must be between 1 (the same delay each time) and 100", f, p.BackoffFactor)
		}
		if d.MaxDelay.D() < d.FirstDelay.D() {
			bad("%s.max_delay %s must be at least first_delay %s", f, d.MaxDelay.D(), d.FirstDelay.D())
		}
		if math.IsNaN(d.Jitter) || d.Jitter < 0 || d.Jitter > 1 {
			bad("%s.jitter %v must be a fraction between 0 and 1", f, p.Jitter)
		}
		if d.MaxAttempts < 1 || d.MaxAttempts > 100 {
			bad("%s.max_attempts %d must be between 1 and 100", f, p.MaxAttempts)
		}
		if math.IsNaN(d.RatePerSecond) || d.RatePerSecond < 0 || d.RatePerSecond > 100000 {
			bad("%s.rate_per_second %v must be between 0 (unthrottled) and 100000", f, p.RatePerSecond)
		}
		if p.OnUnknown != "" && !ValidOnUnknown(p.OnUnknown) {
			bad("%s.on_unknown %q must be retry or hold (default replay.on_unknown)", f, p.OnUnknown)
		}
		if cn := p.Canary; cn != nil && (cn.Count < 1 || cn.Count > 1000 || cn.WaitSeconds < 1 || cn.WaitSeconds > 86400) {
			bad("%s.canary: count %d must be between 1 and 1000 and wait_seconds %d between 1 and 86400", f, cn.Count, cn.WaitSeconds)
		}
	}
	return errs
}
