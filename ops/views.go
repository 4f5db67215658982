package ops

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/store"
)

// Groups lists failure groups within the caller's scope, largest first. A
// queue outside the scope is ErrForbidden.
func (s *Service) Groups(ctx context.Context, c Caller, q store.GroupQuery) ([]store.Group, error) {
	p := c.Principal
	if err := Authorize(p, ActGroups); err != nil {
		return nil, err
	}
	if err := CheckText("source_queue", q.SourceQueue); err != nil {
		return nil, err
	}
	if q.SourceQueue != "" && !p.SeesQueue(q.SourceQueue) {
		return nil, forbidden("source_queue: token %s may not see queue %s", p.Name, q.SourceQueue)
	}
	q.Scope = p.Queues
	groups, err := s.st.Groups(ctx, q)
	if groups == nil && err == nil {
		groups = []store.Group{}
	}
	for i := range groups {
		s.presentGroup(p, &groups[i])
	}
	return groups, err
}

// presentGroup prepares g for p, as present does a message: opened, its
// text masked unless p sees real values. Every group the layer hands to a
// door goes through it.
func (s *Service) presentGroup(p auth.Principal, g *store.Group) {
	s.openGroup(g)
	if s.red.masks(p) {
		s.red.group(g)
	}
}

// Group returns one failure group with its counts within the caller's
// scope; a group with nothing in it is store.ErrNotFound.
func (s *Service) Group(ctx context.Context, c Caller, id string) (store.Group, error) {
	if err := Authorize(c.Principal, ActGroups); err != nil {
		return store.Group{}, err
	}
	if _, err := store.ParseGroupID(id); err != nil {
		return store.Group{}, invalid("id: %q must be a group id (16 hex digits)", id)
	}
	g, err := s.st.GetGroup(ctx, id, c.Principal.Queues)
	if err != nil {
		return store.Group{}, err
	}
	s.presentGroup(c.Principal, &g)
	return g, nil
}

// Stats is the overview within the caller's scope.
func (s *Service) Stats(ctx context.Context, c Caller) (store.Stats, error) {
	if err := Authorize(c.Principal, ActStats); err != nil {
		return store.Stats{}, err
	}
	st, err := s.st.Stats(ctx, c.Principal.Queues)
	for i := range st.TopGroups {
		s.presentGroup(c.Principal, &st.TopGroups[i])
	}
	return st, err
}

// StatusView is the answer of GET /api/v1/status: per source queue counts
// from the summary table, as of At.
type StatusView struct {
	At     time.Time          `json:"at"`
	Queues []store.QueueStats `json:"queues"`
}

// Status reads the per-queue summary within the caller's scope: O(1) in
// the number of messages.
func (s *Service) Status(ctx context.Context, c Caller) (StatusView, error) {
	if err := Authorize(c.Principal, ActStatus); err != nil {
		return StatusView{}, err
	}
	at, queues, err := s.st.QueueSummary(ctx, c.Principal.Queues)
	return StatusView{At: at, Queues: queues}, err
}

// AuditRequest asks for one page of the audit log.
type AuditRequest struct {
	// Actor and Action filter exactly. Optional.
	Actor, Action string
	// Since bounds the time. Optional.
	Since *time.Time
	// Limit is the page size. Optional; default 50, at most 1000.
	Limit int
	// Cursor continues a listing, for the same filters. Optional.
	Cursor string
}

// AuditPage is one page of the audit log, newest first.
type AuditPage struct {
	Entries    []store.AuditEntry `json:"entries"`
	NextCursor *string            `json:"next_cursor"`
	HasMore    bool               `json:"has_more"`
}

// Audit reads the audit log. Who sees which rows: an unscoped admin or
// operator every row; a token with queues (any role) only the rows of its
// queues (store.AuditWithin: those it made or approved, and those that
// provably touched only its queues). Viewers read none.
func (s *Service) Audit(ctx context.Context, c Caller, r AuditRequest) (AuditPage, error) {
	p := c.Principal
	if err := Authorize(p, ActAudit); err != nil {
		return AuditPage{}, err
	}
	for _, f := range []struct{ name, v string }{{"actor", r.Actor}, {"action", r.Action}} {
		if err := CheckText(f.name, f.v); err != nil {
			return AuditPage{}, err
		}
	}
	if r.Action != "" && !slices.Contains(store.AuditActions, r.Action) {
		return AuditPage{}, invalid("action %q must be one of %s", r.Action, strings.Join(store.AuditActions, ", "))
	}
	q := store.AuditQuery{Actor: r.Actor, Action: r.Action, Since: r.Since, Limit: r.Limit}
	if p.Queues != nil {
		q.Within = &store.AuditWithin{Name: p.Name, Queues: p.Queues}
	}
	since := ""
	if r.Since != nil {
		since = r.Since.UTC().Format(time.RFC3339Nano)
	}
	key := "audit\x00" + r.Actor + "\x00" + r.Action + "\x00" + since
	if r.Cursor != "" {
		var err error
		if q.Before, err = decodeCursor(r.Cursor, key); err != nil {
			return AuditPage{}, invalid("cursor: %v", err)
		}
	}
	page, err := s.st.Audit(ctx, q)
	if err != nil {
		return AuditPage{}, err
	}
	out := AuditPage{Entries: page.Entries, HasMore: page.HasMore}
	if out.Entries == nil {
		out.Entries = []store.AuditEntry{}
	}
	if page.HasMore {
		next := encodeCursor(page.LastID, key)
		out.NextCursor = &next
	}
	return out, nil
}

// Jobs shows every cron job: schedule, lease holder, last success, recent
// runs.
func (s *Service) Jobs(ctx context.Context, c Caller) (cron.JobsView, error) {
	if err := Authorize(c.Principal, ActJobs); err != nil {
		return cron.JobsView{}, err
	}
	if s.cfg.Cron == nil {
		return cron.JobsView{}, unavailable("cron jobs are not available on this instance")
	}
	return s.cfg.Cron.Jobs(ctx)
}

// Alerts shows the rules and the alerts pending, firing or just resolved.
// A scoped caller sees only its queues' alerts and overrides, the
// store-wide ones (capacity), and those about a policy or an approval
// request it may see (visibleAlerts).
func (s *Service) Alerts(ctx context.Context, c Caller) (cron.AlertsView, error) {
	p := c.Principal
	if err := Authorize(p, ActAlerts); err != nil {
		return cron.AlertsView{}, err
	}
	if s.cfg.Cron == nil {
		return cron.AlertsView{}, unavailable("alerts are not available on this instance")
	}
	v, err := s.cfg.Cron.Alerts(ctx)
	if err != nil {
		return cron.AlertsView{}, err
	}
	if p.Queues != nil {
		if v.Alerts, err = s.visibleAlerts(ctx, p, v.Alerts); err != nil {
			return cron.AlertsView{}, err
		}
		for i := range v.Rules {
			if v.Rules[i].Overrides == nil {
				continue
			}
			o := maps.Clone(v.Rules[i].Overrides)
			maps.DeleteFunc(o, func(q string, _ alerts.RuleOverrideView) bool { return !p.SeesQueue(q) })
			v.Rules[i].Overrides = o
		}
	}
	if v.Alerts == nil {
		v.Alerts = []alerts.AlertView{}
	}
	return v, nil
}

// visibleAlerts keeps the alerts a scoped caller may see. An alert about
// a policy or an approval request has no source queue: it is kept when
// the caller may see its subject (policyVisible, approvalVisible), since
// it names the subject and tells what it does. Only an alert with no
// queue and no subject (capacity) is store-wide.
func (s *Service) visibleAlerts(ctx context.Context, p auth.Principal, all []alerts.AlertView) ([]alerts.AlertView, error) {
	var policies map[string]bool // read once, when an alert needs it
	out := make([]alerts.AlertView, 0, len(all))
	for _, a := range all {
		var ok bool
		switch {
		case a.Kind == alerts.KindApprovalPending:
			id, err := strconv.ParseInt(a.Subject, 10, 64)
			if err != nil {
				continue
			}
			ap, err := s.st.GetApproval(ctx, id)
			if err != nil && !errors.Is(err, store.ErrNotFound) {
				return nil, err
			}
			ok = err == nil && approvalVisible(p, ap)
		case a.Kind == alerts.KindPolicyPaused:
			if policies == nil {
				v, err := s.cfg.Cron.Policies(ctx)
				if err != nil {
					return nil, err
				}
				policies = map[string]bool{}
				for _, pv := range v.Policies {
					policies[pv.Name] = policyVisible(p, pv.Policy)
				}
			}
			ok = policies[a.Subject]
		case a.Kind.PerSubject():
			// A subject this layer does not know how to check: hidden.
		default:
			ok = a.SourceQueue == "" || p.SeesQueue(a.SourceQueue)
		}
		if ok {
			out = append(out, a)
		}
	}
	return out, nil
}

// Arrivals is each source queue's dead messages per hour over the last
// day within the caller's scope, from the hourly counters (the console's
// overview chart).
func (s *Service) Arrivals(ctx context.Context, c Caller) (store.HourlyArrivals, error) {
	if err := Authorize(c.Principal, ActStatus); err != nil {
		return store.HourlyArrivals{}, err
	}
	return s.st.Arrivals(ctx, c.Principal.Queues)
}
