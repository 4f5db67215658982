package console

import (
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
	AlertsErr  string
	Replays    []replay.Task
	ReplaysErr string
	Groups     []store.Group
}

// queueRow is one source queue of the overview.
type queueRow struct {
	store.QueueStats
	Chart chartView
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
	for _, q := range st.Queues {
		d.Queues = append(d.Queues, queueRow{QueueStats: q, Chart: arrivalsChart(arr.Queues[q.SourceQueue], arr.Since)})
	}
	if av, err := c.cfg.Ops.Alerts(ctx, caller); err != nil {
		_, d.AlertsErr = failure(err)
	} else {
		for _, a := range av.Alerts {
			if a.State == alerts.PhaseFiring {
				d.Alerts = append(d.Alerts, a)
			}
		}
	}
	if tasks, err := c.cfg.Ops.ListReplays(ctx, caller, 50); err != nil {
		_, d.ReplaysErr = failure(err)
	} else {
		for _, t := range tasks {
			if !store.TaskFinished(t.Status) {
				d.Replays = append(d.Replays, t)
			}
		}
	}
	if d.Groups, err = c.cfg.Ops.Groups(ctx, caller, store.GroupQuery{Limit: 5}); err != nil {
		c.renderFailure(w, r, "read the failure groups", err)
		return
	}
	c.render(w, r, http.StatusOK, "overview", sessionFrom(ctx), "Overview", d)
}

// pageSize is the messages page's size.
const pageSize = 50

// messagesData is the messages page.
type messagesData struct {
	Form     filterForm
	Messages []store.Message
	// Count is what the filter matches: exact (Exact) when the summary
	// or group counters answer it or the listing ended, else a lower
	// bound ("more than Count").
	Count int64
	Exact bool
	// Seen is how many messages the pages before this one showed.
	Seen     int64
	NextURL  string
	FirstURL string
	// Back is this page's address, for the actions to return to.
	Back   string
	Queues []string
	// Failed: the filter was refused (the flash says why); nothing is
	// listed or counted.
	Failed bool
	// TextIncomplete: q's words were looked for while more messages were
	// waiting for the text index than a search reads one by one, so older
	// matches among them are missing (ops.MessagePage.TextIncomplete).
	TextIncomplete bool
}

// handleMessages lists messages newest first, a keyset page at a time.
func (c *Console) handleMessages(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	q := r.URL.Query()
	form := readFilterForm(q, "")
	f, err := form.filter()
	if err != nil {
		c.renderFilterFailure(w, r, form, "read the filter", err)
		return
	}
	seen, err := formInt(q, "seen", 0, 0, 1<<53)
	if err != nil {
		c.renderFailure(w, r, "read the page", err)
		return
	}
	page, err := c.cfg.Ops.ListMessages(ctx, caller, ops.ListRequest{Filter: f, Limit: pageSize, Cursor: q.Get("cursor")})
	if err != nil {
		c.renderFilterFailure(w, r, form, "list messages", err)
		return
	}
	d := messagesData{Form: form, Messages: page.Messages, Seen: seen, Back: r.URL.RequestURI()}
	d.FirstURL = "/ui/messages?" + form.values("").Encode()
	if page.HasMore && page.NextCursor != nil {
		v := form.values("")
		v.Set("cursor", *page.NextCursor)
		v.Set("seen", strconv.FormatInt(seen+int64(len(page.Messages)), 10))
		d.NextURL = "/ui/messages?" + v.Encode()
	}
	st, err := c.cfg.Ops.Status(ctx, caller)
	if err != nil {
		c.renderFailure(w, r, "read the queue summary", err)
		return
	}
	for _, qs := range st.Queues {
		d.Queues = append(d.Queues, qs.SourceQueue)
	}
	d.Count, d.Exact = c.count(r, f, st, page, seen)
	// A count of a listing that may miss matches is a lower bound.
	d.TextIncomplete = page.TextIncomplete
	d.Exact = d.Exact && !page.TextIncomplete
	c.render(w, r, http.StatusOK, "messages", sessionFrom(ctx), "Messages", d)
}

// renderFilterFailure answers a filter the layer refused (an invalid
// field path, a field filter nothing bounds, a bad time) with the
// messages page itself: the filter bar as typed, so it can be corrected,
// and the layer's message in the flash. Other failures get the error
// page.
func (c *Console) renderFilterFailure(w http.ResponseWriter, r *http.Request, form filterForm, what string, err error) {
	status, msg := failure(err)
	if status != http.StatusBadRequest && status != http.StatusForbidden {
		c.renderFailure(w, r, what, err)
		return
	}
	s := sessionFrom(r.Context())
	v := c.newView(s, "messages", "Messages", messagesData{Form: form, Failed: true, Back: r.URL.RequestURI()})
	v.Flash = &flash{Error: true, Text: msg}
	c.renderView(w, r, status, "messages", "layout", v)
}

// count is what the filter matches, without counting dead_messages: from
// the summary (status and queue only), from the group's counters (a group
// and status only), or exact when the listing ended on this page; else a
// lower bound, the messages seen so far.
func (c *Console) count(r *http.Request, f store.Filter, st ops.StatusView, page ops.MessagePage, seen int64) (int64, bool) {
	statuses, err := f.Statuses()
	listed := seen + int64(len(page.Messages))
	if err != nil {
		return listed, false
	}
	if !page.HasMore {
		return listed, true
	}
	sum := func(cn store.Counts) int64 {
		var n int64
		for _, s := range store.Statuses {
			if statuses == nil || slices.Contains(statuses, s) {
				n += countOf(cn, s)
			}
		}
		return n
	}
	plain := f.CountersAnswer()
	switch {
	case plain && f.Group == "":
		var n int64
		for _, q := range st.Queues {
			if f.SourceQueue == "" || f.SourceQueue == q.SourceQueue {
				n += sum(q.Counts)
			}
		}
		return n, true
	case plain && f.Group != "":
		g, err := c.cfg.Ops.Group(r.Context(), c.caller(r), f.Group)
		if err == nil && (f.SourceQueue == "" || f.SourceQueue == g.SourceQueue) {
			return sum(g.Counts), true
		}
	}
	return listed, false
}

func countOf(c store.Counts, status string) int64 {
	switch status {
	case store.StatusPending:
		return c.Pending
	case store.StatusReplaying:
		return c.Replaying
	case store.StatusReplayed:
		return c.Replayed
	case store.StatusAcknowledged:
		return c.Acknowledged
	}
	return 0
}

// messageData is the message page.
type messageData struct {
	M          store.Message
	Body       bodyView
	Properties []field
	Headers    []field
	Failure    *failureView
	Timeline   []timelineEvent
	// Deaths is the x-death header as it is, most recent first.
	Deaths []xDeath
	// ReplaysErr says why the replays are not on the timeline; Partial
	// that older ones may be missing from it.
	ReplaysErr     string
	ReplaysPartial bool
	// Edited: the message has a copy out (or on its way), so it has left
	// (or is leaving) the pending set: no replay or edit is offered.
	Edited bool
	Back   string
}

// handleMessage shows one message: body, headers with their AMQP types,
// properties, failure, and its timeline: deaths, replays and edits.
func (c *Console) handleMessage(w http.ResponseWriter, r *http.Request) {
	id, m, ok := c.pathMessage(w, r)
	if !ok {
		return
	}
	var props struct {
		ContentEncoding string `json:"content_encoding"`
	}
	_ = jsonUnmarshal(m.Properties, &props)
	d := messageData{M: m, Body: viewBody(m.Body, m.BodySize, props.ContentEncoding),
		Properties: viewFields(m.Properties), Headers: viewFields(m.Headers), Failure: viewFailure(m.Failure),
		Deaths: viewDeaths(m), Back: "/ui/messages/" + strconv.FormatInt(id, 10),
		Edited: m.Edited != nil && m.Edited.State != store.EditFailed}
	replays, complete, err := c.cfg.Ops.MessageReplays(r.Context(), c.caller(r), id, m.FirstFailedAt)
	if err != nil {
		_, d.ReplaysErr = failure(err)
		if d.ReplaysErr == "" {
			d.ReplaysErr = c.internal(r, "read the replays of the message", err)
		}
	}
	d.ReplaysPartial = !complete && err == nil
	d.Timeline = viewTimeline(m, replays)
	c.render(w, r, http.StatusOK, "message", sessionFrom(r.Context()), "Message "+strconv.FormatInt(id, 10), d)
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
	Groups      []store.Group
	SourceQueue string
	Status      string
	Queues      []string
}

// handleGroups lists failure groups, largest first, from their counters.
func (c *Console) handleGroups(w http.ResponseWriter, r *http.Request) {
	ctx, caller := r.Context(), c.caller(r)
	q := r.URL.Query()
	d := groupsData{SourceQueue: strings.TrimSpace(q.Get("source_queue")), Status: strings.TrimSpace(q.Get("status"))}
	var err error
	if d.Groups, err = c.cfg.Ops.Groups(ctx, caller, store.GroupQuery{SourceQueue: d.SourceQueue, Status: d.Status, Limit: 50}); err != nil {
		c.renderFailure(w, r, "list failure groups", err)
		return
	}
	st, err := c.cfg.Ops.Status(ctx, caller)
	if err != nil {
		c.renderFailure(w, r, "read the queue summary", err)
		return
	}
	for _, qs := range st.Queues {
		d.Queues = append(d.Queues, qs.SourceQueue)
	}
	c.render(w, r, http.StatusOK, "groups", sessionFrom(ctx), "Failure groups", d)
}

// replaysData is the replays page.
type replaysData struct {
	Tasks []taskView
}

// taskView is a replay task with what its row shows.
type taskView struct {
	replay.Task
	Finished bool
	// Done is how many messages are settled (published, failed, skipped
	// or unknown), the progress bar's value.
	Done int64
	// Reasons lists the skip reasons, sorted.
	Reasons [][2]string
}

func viewTask(t replay.Task) taskView {
	v := taskView{Task: t, Finished: store.TaskFinished(t.Status), Done: t.Published + t.Failed + t.Skipped + t.Unknown}
	keys := make([]string, 0, len(t.SkipReasons))
	for k := range t.SkipReasons {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		v.Reasons = append(v.Reasons, [2]string{k, num(t.SkipReasons[k])})
	}
	return v
}

// handleReplays lists recent replay tasks; rows of running tasks poll
// their own fragment (handleReplay) every few seconds.
func (c *Console) handleReplays(w http.ResponseWriter, r *http.Request) {
	tasks, err := c.cfg.Ops.ListReplays(r.Context(), c.caller(r), 100)
	if err != nil {
		c.renderFailure(w, r, "list replays", err)
		return
	}
	d := replaysData{}
	for _, t := range tasks {
		d.Tasks = append(d.Tasks, viewTask(t))
	}
	c.render(w, r, http.StatusOK, "replays", sessionFrom(r.Context()), "Replays", d)
}

// handleReplay answers one task's row (for htmx polling), or its page.
func (c *Console) handleReplay(w http.ResponseWriter, r *http.Request) {
	id, ok := c.pathID(w, r)
	if !ok {
		return
	}
	t, err := c.cfg.Ops.GetReplay(r.Context(), c.caller(r), id)
	if err != nil {
		c.renderFailure(w, r, "read the replay", err)
		return
	}
	if r.Header.Get("HX-Request") == "true" {
		v := c.newView(sessionFrom(r.Context()), "replays", "", nil)
		c.renderFragment(w, r, "replays", "replay-row", rowData{T: viewTask(t), CSRF: v.CSRF, CanCancel: v.Can.Cancel})
		return
	}
	c.render(w, r, http.StatusOK, "replays", sessionFrom(r.Context()), "Replay "+strconv.FormatInt(id, 10), replaysData{Tasks: []taskView{viewTask(t)}})
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
	NextURL              string
}

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
