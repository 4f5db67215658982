package broker

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Why dlq reads RabbitMQ's policies.
//
// dlq declares its own queues with nothing that could drop a message
// (OwnQueueArgs), but a policy or an operator policy applies to a queue
// whatever it was declared with. A delivery limit makes a quorum queue drop
// a message after that many deliveries (every crash or lost connection of a
// consumer is one); a length limit drops the oldest messages or refuses new
// dead letters, which RabbitMQ then loses for sources that dead-letter at
// most once; a message TTL or a queue expiry drops them outright. dlq's
// queues have no dead-letter exchange, so each of those is a loss of
// messages dlq never stored. AMQP cannot see policies, so PolicyCheck asks
// the management API.
//
// The queue listing names the policy in force on each queue as soon as it
// applies; the operator policy it shows only with statistics, which may be
// switched off or minutes late, so operator policies are matched here by
// their pattern, priority and apply-to, as RabbitMQ matches them.

// UnsafePolicyKeys are the policy keys (queue arguments with an "x-"
// prefix) that can make RabbitMQ drop a message in dlq's own queues.
var UnsafePolicyKeys = []string{"delivery-limit", "max-length", "max-length-bytes", "message-ttl", "expires"}

// PolicyFinding is one setting that can drop messages from one of dlq's
// queues.
type PolicyFinding struct {
	Queue string
	// Key is the policy key, e.g. "delivery-limit" (for a queue argument,
	// without its "x-" prefix).
	Key   string
	Value any
	// Source is where it comes from: `policy "p"`, `operator policy "p"`
	// or `queue argument x-max-length`.
	Source string
}

func (f PolicyFinding) String() string {
	return fmt.Sprintf("queue %q: %s=%v from %s", f.Queue, f.Key, f.Value, f.Source)
}

// UnsafeSettings returns the settings of def (a policy definition, or queue
// arguments with prefix "x-") that can drop messages. A negative delivery
// limit means unlimited (RabbitMQ 4), and an overflow mode only matters
// next to a length limit, which is reported itself.
func UnsafeSettings(def map[string]any, prefix string) []PolicyFinding {
	var out []PolicyFinding
	for _, k := range UnsafePolicyKeys {
		v, ok := def[prefix+k]
		if !ok || v == nil {
			continue
		}
		if k == "delivery-limit" {
			if n, ok := jsonNumber(v); ok && n < 0 {
				continue
			}
		}
		out = append(out, PolicyFinding{Key: k, Value: v})
	}
	return out
}

func jsonNumber(v any) (float64, bool) {
	switch x := v.(type) {
	case float64:
		return x, true
	case json.Number:
		f, err := x.Float64()
		return f, err == nil
	case int64:
		return float64(x), true
	case int:
		return float64(x), true
	}
	return 0, false
}

// PolicyCheckConfig configures a PolicyCheck.
type PolicyCheckConfig struct {
	// URL is the management API's base URL, without user information
	// (http://127.0.0.1:15672/). Required.
	URL string
	// User and Password authenticate to the management API. Optional.
	User, Password string
	// Vhost holds dlq's queues. Optional; default "/".
	Vhost string
	// Queues are dlq's own dead-letter queues. Required.
	Queues []string
	// Interval is the time between checks. Optional; default 1m.
	Interval time.Duration
	// Client is the HTTP client. Optional; default one with a 10s timeout.
	Client *http.Client
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives dlq_queue_policy_unsafe{queue}. Optional.
	Registerer prometheus.Registerer
}

// PolicyCheck watches the policies in force on dlq's own queues and says,
// loudly, when one can drop dead messages before dlq stored them.
type PolicyCheck struct {
	cfg    PolicyCheckConfig
	log    *slog.Logger
	unsafe *prometheus.GaugeVec
	// reachErr is the last failure to reach the API; nil once it answers.
	// Only Run's goroutine uses it.
	reachErr error
}

// NewPolicyCheck validates cfg and registers the gauge, with a zero series
// for each queue.
func NewPolicyCheck(cfg PolicyCheckConfig) (*PolicyCheck, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return nil, fmt.Errorf("broker: policy check: management URL %q must be an http:// or https:// URL", cfg.URL)
	}
	if u.User != nil {
		return nil, errors.New("broker: policy check: pass the management API's user and password in User and Password, not in the URL")
	}
	if len(cfg.Queues) == 0 {
		return nil, errors.New("broker: policy check: Queues must name at least one queue")
	}
	cfg.URL = strings.TrimSuffix(cfg.URL, "/")
	cfg.Vhost = cmp.Or(cfg.Vhost, "/")
	cfg.Interval = cmp.Or(cfg.Interval, time.Minute)
	if cfg.Client == nil {
		// A transport of its own, so that Run can close its idle
		// connections when it ends, without touching anyone else's.
		cfg.Client = &http.Client{Timeout: 10 * time.Second, Transport: http.DefaultTransport.(*http.Transport).Clone()}
	}
	p := &PolicyCheck{
		cfg: cfg,
		log: cmp.Or(cfg.Logger, slog.Default()).With("component", "policy_check"),
		unsafe: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dlq_queue_policy_unsafe",
			Help: "1 when a policy, operator policy or argument of one of dlq's own queues can make RabbitMQ drop dead messages before dlq stored them (delivery-limit, max-length, max-length-bytes, message-ttl, expires); see the log for which.",
		}, []string{"queue"}),
	}
	for _, q := range cfg.Queues {
		p.unsafe.WithLabelValues(q).Set(0)
	}
	if cfg.Registerer != nil {
		if err := cfg.Registerer.Register(p.unsafe); err != nil {
			return nil, fmt.Errorf("broker: policy check: register metrics: %w", err)
		}
	}
	return p, nil
}

// Run checks at once and then every Interval until ctx ends. It never
// fails: an unreachable API is logged (once per outage) and retried.
func (p *PolicyCheck) Run(ctx context.Context) error {
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	defer p.cfg.Client.CloseIdleConnections()
	for {
		p.checkOnce(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

func (p *PolicyCheck) checkOnce(ctx context.Context) {
	findings, err := p.Check(ctx)
	if ctx.Err() != nil {
		return
	}
	wasDown := p.reachErr != nil
	p.reachErr = err
	if err != nil {
		if !wasDown {
			p.log.Warn("cannot check the policies of dlq's queues through the management API; retrying", "url", p.cfg.URL, "error", err, "retry_in", p.cfg.Interval)
		}
		return
	}
	if wasDown {
		p.log.Info("management API reachable again; checking the policies of dlq's queues", "url", p.cfg.URL)
	}
	bad := map[string]bool{}
	for _, f := range findings {
		bad[f.Queue] = true
		p.log.Error("UNSAFE: RabbitMQ can drop dead messages from dlq's own queue before dlq stores them; remove this setting from the queue (dlq's queues need no limit, TTL or expiry)",
			"queue", f.Queue, "key", f.Key, "value", f.Value, "source", f.Source)
	}
	for _, q := range p.cfg.Queues {
		if bad[q] {
			p.unsafe.WithLabelValues(q).Set(1)
		} else {
			p.unsafe.WithLabelValues(q).Set(0)
		}
	}
}

// Check reads the queues, policies and operator policies of the vhost once
// and returns every setting that can drop messages from dlq's queues. A
// queue that does not exist (yet) has none.
func (p *PolicyCheck) Check(ctx context.Context) ([]PolicyFinding, error) {
	vh := url.PathEscape(p.cfg.Vhost)
	quoted := make([]string, len(p.cfg.Queues))
	for i, q := range p.cfg.Queues {
		quoted[i] = regexp.QuoteMeta(q)
	}
	// disable_stats: the listing then comes from the queue records, at
	// once, and names the policy in force (not the operator policy).
	q := url.Values{
		"disable_stats": {"true"}, "page": {"1"}, "page_size": {"500"},
		"use_regex": {"true"}, "name": {"^(" + strings.Join(quoted, "|") + ")$"},
	}
	var page struct {
		Items []mgmtQueue `json:"items"`
	}
	if err := p.get(ctx, "/api/queues/"+vh+"?"+q.Encode(), &page); err != nil {
		return nil, err
	}
	var policies, operator []mgmtPolicy
	if err := p.get(ctx, "/api/policies/"+vh, &policies); err != nil {
		return nil, err
	}
	if err := p.get(ctx, "/api/operator-policies/"+vh, &operator); err != nil {
		return nil, err
	}
	byName := map[string]mgmtPolicy{}
	for _, pol := range policies {
		byName[pol.Name] = pol
	}
	var out []PolicyFinding
	for _, mq := range page.Items {
		if !slices.Contains(p.cfg.Queues, mq.Name) {
			continue
		}
		for _, f := range UnsafeSettings(mq.Arguments, "x-") {
			f.Queue, f.Source = mq.Name, "queue argument x-"+f.Key
			out = append(out, f)
		}
		if mq.Policy != "" {
			if pol, ok := byName[mq.Policy]; ok {
				for _, f := range UnsafeSettings(pol.Definition, "") {
					f.Queue, f.Source = mq.Name, fmt.Sprintf("policy %q", pol.Name)
					out = append(out, f)
				}
			}
		}
		for _, pol := range p.matching(operator, mq) {
			for _, f := range UnsafeSettings(pol.Definition, "") {
				f.Queue, f.Source = mq.Name, fmt.Sprintf("operator policy %q", pol.Name)
				out = append(out, f)
			}
		}
	}
	return out, nil
}

type mgmtQueue struct {
	Name      string     `json:"name"`
	Type      string     `json:"type"`
	Arguments jsonObject `json:"arguments"`
	Policy    string     `json:"policy"`
}

type mgmtPolicy struct {
	Name       string     `json:"name"`
	Pattern    string     `json:"pattern"`
	ApplyTo    string     `json:"apply-to"`
	Priority   int        `json:"priority"`
	Definition jsonObject `json:"definition"`
}

// jsonObject is a JSON object that the management API may also write as
// [] when empty (an empty Erlang property list).
type jsonObject map[string]any

func (o *jsonObject) UnmarshalJSON(b []byte) error {
	var list []any
	if json.Unmarshal(b, &list) == nil && len(list) == 0 {
		*o = nil
		return nil
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil {
		return err
	}
	*o = m
	return nil
}

// matching returns the policies of the highest priority among those that
// apply to q (all of them on a tie: RabbitMQ's choice among equals is not
// specified, so each could be the one). A pattern Go cannot compile (PCRE
// has constructs RE2 lacks) is logged and treated as matching, so a check
// errs towards a warning.
func (p *PolicyCheck) matching(pols []mgmtPolicy, q mgmtQueue) []mgmtPolicy {
	var best []mgmtPolicy
	for _, pol := range pols {
		if !appliesTo(pol.ApplyTo, q.Type) {
			continue
		}
		re, err := regexp.Compile(pol.Pattern)
		if err != nil {
			p.log.Warn("cannot evaluate a policy pattern; assuming it applies to dlq's queue", "policy", pol.Name, "pattern", pol.Pattern, "queue", q.Name, "error", err)
		} else if !re.MatchString(q.Name) {
			continue
		}
		switch {
		case len(best) == 0 || pol.Priority > best[0].Priority:
			best = []mgmtPolicy{pol}
		case pol.Priority == best[0].Priority:
			best = append(best, pol)
		}
	}
	return best
}

func appliesTo(applyTo, queueType string) bool {
	switch applyTo {
	case "all", "queues", "":
		return true
	case "classic_queues":
		return queueType == "classic"
	case "quorum_queues":
		return queueType == "quorum"
	case "streams":
		return queueType == "stream"
	}
	return false
}

// get decodes the JSON answer to a GET of path.
func (p *PolicyCheck) get(ctx context.Context, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.cfg.URL+path, nil)
	if err != nil {
		return fmt.Errorf("management API: build request for %s: %w", path, err)
	}
	if p.cfg.User != "" || p.cfg.Password != "" {
		req.SetBasicAuth(p.cfg.User, p.cfg.Password)
	}
	resp, err := p.cfg.Client.Do(req)
	if err != nil {
		return fmt.Errorf("management API: GET %s: %w", path, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 32<<20))
	if err != nil {
		return fmt.Errorf("management API: GET %s: read answer: %w", path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("management API: GET %s answered %s: %.200s", path, resp.Status, b)
	}
	if err := json.Unmarshal(b, v); err != nil {
		return fmt.Errorf("management API: GET %s: decode answer: %w", path, err)
	}
	return nil
}
