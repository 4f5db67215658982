package console

import (
	"cmp"
	"encoding/json"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// overviewData is the overview page.
type overviewData struct {
	At     time.Time
	Queues []queueRow
	Alerts []alerts.AlertView
	// AlertsErr says why alerts are not shown (no cron on this instance).
	AlertsErr string
	// AlertsStale is set when alert evaluation has stopped: Alerts is
	// then empty, since no alert is known to be firing.
	AlertsStale *staleAlerts
	Replays     []replay.Task
	ReplaysErr  string
	Groups      []store.Group
}

// staleAlerts says since when alerts have not been evaluated, and which
// were firing when they last were.
type staleAlerts struct {
	EvaluatedAt time.Time
	StaleAfter  time.Time
	WasFiring   []alerts.AlertView
}

// queueRow is one source queue of the overview.
type queueRow struct {
	store.QueueStats
	Chart chartView
	// Firing: an alert on this queue is firing.
	Firing bool
}

// handleOverview: per queue counts from the summary, the oldest pending
// age, arrivals over 24 hours, firing alerts, running replays and the
// largest failure groups. Every number comes from summary tables.
func (c *Console) handleOverview(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	st, err := c.cfg.Ops.Status(ctx, caller)
	if err != nil {
		c.renderFailure(w, r, "read the queue summary", err)
		return
	}
	arr, err := c.cfg.Ops.Arrivals(ctx, caller)
	if err != nil {
		c.renderFailure(w, r, "read the arrivals", err)
		return
	}
	d := overviewData{At: st.At}
	firing := map[string]bool{}
	if av, err := c.cfg.Ops.Alerts(ctx, caller); err != nil {
		_, d.AlertsErr = failure(err)
	} else {
		d.Alerts, d.AlertsStale = overviewAlerts(av)
		for _, a := range d.Alerts {
			firing[a.SourceQueue] = true
		}
	}
	for _, q := range st.Queues {
		d.Queues = append(d.Queues, queueRow{QueueStats: q, Chart: arrivalsChart(arr.Queues[q.SourceQueue], arr.Since),
			Firing: firing[q.SourceQueue]})
	}
	sortQueues(d.Queues)
	// The unfinished ones, however many finished since they began: a
	// long replay stayed out of sight once fifty newer tasks were made.
	if d.Replays, err = c.cfg.Ops.ListActiveReplays(ctx, caller, 50); err != nil {
		_, d.ReplaysErr = failure(err)
	}
	if d.Groups, err = c.cfg.Ops.Groups(ctx, caller, store.GroupQuery{Limit: 5}); err != nil {
		c.renderFailure(w, r, "read the failure groups", err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", sessionFrom(ctx), "Overview", d)
}

// overviewAlerts returns the firing alerts of av, or, when its state is
// stale, none and what was firing when alerts were last evaluated.
func overviewAlerts(av cron.AlertsView) ([]alerts.AlertView, *staleAlerts) {
	if av.Stale && av.EvaluatedAt != nil && av.StaleAfter != nil {
		s := &staleAlerts{EvaluatedAt: *av.EvaluatedAt, StaleAfter: *av.StaleAfter}
		for _, a := range av.Alerts {
			if a.LastState == alerts.PhaseFiring {
				s.WasFiring = append(s.WasFiring, a)
			}
		}
		return nil, s
	}
	var firing []alerts.AlertView
	for _, a := range av.Alerts {
		if a.State == alerts.PhaseFiring {
			firing = append(firing, a)
		}
	}
	return firing, nil
}

// sortQueues puts the queues in trouble first: those with a firing
// alert, then by pending messages, most first, then by name.
func sortQueues(qs []queueRow) {
	slices.SortStableFunc(qs, func(a, b queueRow) int {
		switch {
		case a.Firing != b.Firing:
			if a.Firing {
				return -1
			}
			return 1
		case a.Counts.Pending != b.Counts.Pending:
			return cmp.Compare(b.Counts.Pending, a.Counts.Pending)
		}
		return strings.Compare(a.SourceQueue, b.SourceQueue)
	})
}

// pageSize is the audit page's size.
const pageSize = 50

// messageData is the message page.
type messageData struct {
	M          store.Message
	Body       bodyView
	Properties []shownField
	Headers    []shownField
	Failure    *failureView
	Timeline   []timelineEvent
	// Deaths is the x-death header as it is, most recent first.
	Deaths []xDeath
	// DeathsRecorded counts the deaths in its queue the timeline shows
	// (deathsRecorded), a lower bound when DeathsAtLeast; DiedBefore: it
	// died before its last replay too, so the broker's count (death_count)
	// is only the deaths since.
	DeathsRecorded            int64
	DeathsAtLeast, DiedBefore bool
	// ReplaysErr says why the replays are not on the timeline; Partial
	// that older ones may be missing from it.
	ReplaysErr     string
	ReplaysPartial bool
	// Edited: the message has a copy out (or on its way), so it has left
	// (or is leaving) the pending set: no replay or edit is offered.
	Edited bool
	// Links ties an edit's original and its stored copy to each other;
	// LinksErr says why they are not shown.
	Links    ops.EditLinks
	LinksErr string
	Back     string
	// EditTask is the task that sends the edit's copy, when the message's
	// replays hold it (nil otherwise): Moving says when no runner took it.
	EditTask *replay.Task
	// Moving is what the message is on its way to, in words (moving);
	// Follows: the page refreshes itself to follow it.
	Moving  string
	Follows bool
}

// handleMessage shows one message: body, headers with their AMQP types,
// properties, failure, and its timeline: deaths, replays and edits.
func (c *Console) handleMessage(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	m, err := c.cfg.Ops.GetMessage(r.Context(), c.caller(r), id)
	if ops.Classify(err) == ops.CodeNotFound {
		c.renderGone(w, r, id, err)
		return
	}
	if err != nil {
		c.renderFailure(w, r, "read the message", err)
		return
	}
	var props struct {
		ContentEncoding string `json:"content_encoding"`
	}
	_ = jsonUnmarshal(m.Properties, &props)
	d := messageData{M: m, Body: viewBody(m.Body, m.BodySize, props.ContentEncoding),
		Properties: showProperties(viewFields(m.Properties)), Headers: showFields(viewFields(m.Headers)), Failure: viewFailure(m.Failure),
		Deaths: viewDeaths(m), Back: "/ui/messages/" + strconv.FormatInt(id, 10),
		Edited: m.Edited != nil && m.Edited.State != store.EditFailed}
	// The links are a convenience: without them the page still stands,
	// as it does without the replays.
	links, err := c.cfg.Ops.EditLinks(r.Context(), c.caller(r), m)
	if err != nil {
		_, d.LinksErr = failure(err)
	}
	d.Links = links
	replays, complete, err := c.cfg.Ops.MessageReplays(r.Context(), c.caller(r), id, m.FirstFailedAt)
	if err != nil {
		_, d.ReplaysErr = failure(err)
		if d.ReplaysErr == "" {
			d.ReplaysErr = c.internal(r, "read the replays of the message", err)
		}
	}
	d.ReplaysPartial = !complete && err == nil
	d.Timeline = viewTimeline(m, replays)
	d.EditTask = editTask(m, replays)
	var died int
	d.DeathsRecorded, died, d.DeathsAtLeast = deathsRecorded(m)
	d.DiedBefore = died > 1
	d.Moving, d.Follows = d.moving(time.Now())
	v := c.newView(sessionFrom(r.Context()), "message", "Message "+strconv.FormatInt(id, 10), d)
	if d.Follows {
		v.Live, v.RefreshURL = "on", r.URL.RequestURI()
	}
	c.renderView(w, r, http.StatusOK, "message", "layout", v)
}

// handleBody downloads a body as it was received, byte for byte, as an
// attachment: the browser saves it and never renders it.
func (c *Console) handleBody(w http.ResponseWriter, r *http.Request) {
	id, m, ok := c.pathMessage(w, r)
	if !ok {
		return
	}
	if m.Body == nil {
		c.renderError(w, r, sessionFrom(r.Context()), http.StatusForbidden, "Refused: token "+sessionFrom(r.Context()).principal.Name+" may not see message bodies.")
		return
	}
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Content-Disposition", `attachment; filename="dlq-message-`+strconv.FormatInt(id, 10)+`.bin"`)
	w.Header().Set("Content-Length", strconv.Itoa(len(*m.Body)))
	_, _ = w.Write(*m.Body)
}

func (c *Console) pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.renderError(w, r, sessionFrom(r.Context()), http.StatusNotFound, "Not found: "+r.URL.Path)
		return 0, false
	}
	return id, true
}

// pathMessage reads the message named by the path's id as the caller may
// see it; on failure it has already answered (404 for a bad id, the
// failure page otherwise).
func (c *Console) pathMessage(w http.ResponseWriter, r *http.Request) (int64, store.Message, bool) {
	id, ok := c.pathID(w, r)
	if !ok {
		return 0, store.Message{}, false
	}
	m, err := c.cfg.Ops.GetMessage(r.Context(), c.caller(r), id)
	if err != nil {
		c.renderFailure(w, r, "read the message", err)
		return 0, store.Message{}, false
	}
	return id, m, true
}

// groupsData is the failure groups page.
type groupsData struct {
	Groups                        []store.Group
	SourceQueue, Status, Category string
	Queues                        []string
	// Back is this page's address with its filters, for the actions to
	// return to.
	Back string
}

// handleGroups lists failure groups, largest first, from their counters.
func (c *Console) handleGroups(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	q := r.URL.Query()
	d := groupsData{SourceQueue: strings.TrimSpace(q.Get("source_queue")), Status: strings.TrimSpace(q.Get("status")),
		Category: strings.TrimSpace(q.Get("category")), Back: r.URL.RequestURI()}
	var err error
	if d.Groups, err = c.cfg.Ops.Groups(ctx, caller, store.GroupQuery{SourceQueue: d.SourceQueue, Status: d.Status, Category: d.Category, Limit: 50}); err != nil {
		c.renderFailure(w, r, "list failure groups", err)
		return
	}
	st, err := c.cfg.Ops.Status(ctx, caller)
	if err != nil {
		c.renderFailure(w, r, "read the queue summary", err)
		return
	}
	d.Queues = queueNames(st)
	c.render(w, r, http.StatusOK, "groups", sessionFrom(ctx), "Failure groups", d)
}

// queueNames are the source queues of a summary the caller may see, for a
// page's queue filter.
func queueNames(st ops.StatusView) []string {
	names := make([]string, 0, len(st.Queues))
	for _, qs := range st.Queues {
		names = append(names, qs.SourceQueue)
	}
	return names
}

// jobsData is the jobs and alerts page.
type jobsData struct {
	Jobs      *cron.JobsView
	JobsErr   string
	Alerts    *cron.AlertsView
	AlertsErr string
}

// handleJobs shows the cron jobs with their holder and recent runs, and
// the alerts with their state and since when.
func (c *Console) handleJobs(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	d := jobsData{}
	if j, err := c.cfg.Ops.Jobs(ctx, caller); err != nil {
		_, d.JobsErr = failure(err)
	} else {
		d.Jobs = &j
	}
	if a, err := c.cfg.Ops.Alerts(ctx, caller); err != nil {
		_, d.AlertsErr = failure(err)
	} else {
		d.Alerts = &a
	}
	c.render(w, r, http.StatusOK, "jobs", sessionFrom(ctx), "Jobs and alerts", d)
}

// auditData is the audit page.
type auditData struct {
	Actor, Action, Since string
	Page                 ops.AuditPage
	// Rows are the page's entries, each with its selection in words when
	// it has one of a selection's shapes.
	Rows    []auditRow
	NextURL string
	// Actions are the action filter's choices.
	Actions []string
}

// auditRow is one audit entry as the page shows it.
type auditRow struct {
	store.AuditEntry
	// Words are the row in words: its selection, or what a decision or a
	// cancel did, with links to the replay or request it names.
	Words *selectionWords
}

// auditActions are the actions the audit page's filter offers.
var auditActions = []string{"", store.ActionAcknowledge, store.ActionDelete, "replay", auditActionCancel, store.ActionEditReplay,
	store.ActionApprovalRequest, store.ActionApprove, store.ActionReject, store.ActionApprovalWithdraw, store.ActionApprovalExpire}

// handleAudit pages the audit log, filtered by actor, action and time.
func (c *Console) handleAudit(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	d := auditData{Actor: strings.TrimSpace(q.Get("actor")), Action: strings.TrimSpace(q.Get("action")), Since: strings.TrimSpace(q.Get("since"))}
	since, err := parseTime("since", d.Since)
	if err != nil {
		c.renderFailure(w, r, "read the filter", err)
		return
	}
	d.Page, err = c.cfg.Ops.Audit(r.Context(), c.caller(r), ops.AuditRequest{Actor: d.Actor, Action: d.Action, Since: since, Limit: pageSize, Cursor: q.Get("cursor")})
	if err != nil {
		c.renderFailure(w, r, "read the audit log", err)
		return
	}
	d.Actions = auditActions
	sels := make([]*ops.SelectionView, len(d.Page.Entries))
	var filters []*store.Filter
	for i, e := range d.Page.Entries {
		if sel, ok := auditSelection(e.Selection); ok {
			sels[i] = &sel
			filters = append(filters, sel.Filter)
		}
	}
	groups := c.groupsOf(r.Context(), c.caller(r), filters...)
	for i, e := range d.Page.Entries {
		row := auditRow{AuditEntry: e, Words: auditDid(e)}
		if sel := sels[i]; sel != nil {
			if sel.Filter != nil && sel.Filter.Group != "" {
				sel.Group = groups[sel.Filter.Group]
			}
			w := describeSelection(*sel)
			row.Words = &w
		}
		row.Words = withRefs(row.Words, auditRefs(e))
		d.Rows = append(d.Rows, row)
	}
	if d.Page.HasMore && d.Page.NextCursor != nil {
		v := url.Values{}
		for k, s := range map[string]string{"actor": d.Actor, "action": d.Action, "since": d.Since, "cursor": *d.Page.NextCursor} {
			if s != "" {
				v.Set(k, s)
			}
		}
		d.NextURL = "/ui/audit?" + v.Encode()
	}
	c.render(w, r, http.StatusOK, "audit", sessionFrom(r.Context()), "Audit", d)
}

func jsonUnmarshal(raw []byte, v any) error {
	if len(raw) == 0 {
		return nil
	}
	return json.Unmarshal(raw, v)
}
