package console

import (
	"maps"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The replays list and a replay task's page: what each task replays in
// words, who asked and who approved, its outcome, and why messages were
// not published.

// replaysData is the replays page.
type replaysData struct {
	Tasks []taskView
}

// taskView is a replay task with what its row and page show.
type taskView struct {
	replay.Task
	Finished bool
	// Done is how many messages are settled (published, failed, skipped
	// or unknown), the progress bar's value.
	Done int64
	// Reasons says why messages were skipped, in words (skipWords).
	Reasons []string
	// Source is what the task was asked to replay, in words.
	Source selectionWords
}

// OutcomeWords says the task's outcome in words ("" while it runs): the
// colour the page gives it is never the only sign.
func (t taskView) OutcomeWords() string {
	return map[string]string{replay.OutcomeAllPublished: "all published", replay.OutcomePartial: "partly published",
		replay.OutcomeNonePublished: "nothing published"}[t.Outcome]
}

// NeverStarted: the task finished (cancelled, say) before the time it
// was to start: that time is no longer to come.
func (t taskView) NeverStarted() bool {
	return t.Finished && t.FinishedAt != nil && t.FinishedAt.Before(t.StartAt)
}

func viewTask(t replay.Task) taskView {
	return taskView{Task: t, Finished: store.TaskFinished(t.Status), Done: t.Published + t.Failed + t.Skipped + t.Unknown,
		Reasons: skipWords(t.SkipReasons)}
}

// skipWords says why messages were, or would be, skipped: one phrase per
// reason, sorted by reason ("3 not pending any more"). Every page that
// shows skip reasons reads them here, so no page shows the store's codes.
func skipWords(reasons map[string]int64) []string {
	var out []string
	for _, k := range slices.Sorted(maps.Keys(reasons)) {
		n := num(reasons[k])
		switch k {
		case store.SkipNotPending:
			out = append(out, n+" not pending any more")
		case store.SkipDeleted:
			out = append(out, n+" deleted")
		case store.SkipNotFound:
			out = append(out, n+" never stored (no message had the id)")
		case store.SkipMaxReplays:
			out = append(out, n+" held by the loop guard (replayed too often)")
		case store.SkipOther:
			out = append(out, n+" for another reason")
		default:
			// A reason this version has no words for: shown as it came.
			out = append(out, n+" "+strings.ReplaceAll(k, "_", " "))
		}
	}
	return out
}

// viewTasks describes tasks, their selections in words (each failure
// group looked up once).
func (c *Console) viewTasks(r *http.Request, tasks ...replay.Task) []taskView {
	filters := make([]*store.Filter, len(tasks))
	for i, t := range tasks {
		filters[i] = t.Request.Filter
	}
	groups := c.groupsOf(r.Context(), c.caller(r), filters...)
	out := make([]taskView, len(tasks))
	for i, t := range tasks {
		out[i] = viewTask(t)
		out[i].Source = describeSelection(taskSelection(t, groups))
	}
	return out
}

// handleReplays lists recent replay tasks; rows of running tasks poll
// their own fragment (handleReplay) every few seconds.
func (c *Console) handleReplays(w http.ResponseWriter, r *http.Request) {
	// Every unfinished task first, however old (one could fall past the
	// newest hundred while it still ran, and could not be found to be
	// cancelled), then the newest hundred of the rest.
	active, err := c.cfg.Ops.ListActiveReplays(r.Context(), c.caller(r), 1000)
	if err != nil {
		c.renderFailure(w, r, "list replays", err)
		return
	}
	recent, err := c.cfg.Ops.ListReplays(r.Context(), c.caller(r), 100)
	if err != nil {
		c.renderFailure(w, r, "list replays", err)
		return
	}
	tasks := active
	for _, t := range recent {
		if store.TaskFinished(t.Status) {
			tasks = append(tasks, t)
		}
	}
	c.render(w, r, http.StatusOK, "replays", sessionFrom(r.Context()), "Replays", replaysData{Tasks: c.viewTasks(r, tasks...)})
}

// replayData is a replay task's page.
type replayData struct {
	T taskView
	// Errors are why messages were not published, most frequent first;
	// Rest counts the messages of the reasons left out.
	Errors []replayError
	Rest   int64
	// FailedHref lists every message the task failed to publish.
	FailedHref string
	CSRF       string
	CanCancel  bool
	// Target is, for a task that has not started, what the broker says of
	// its target now: missing, it will publish nothing.
	Target ops.TargetCheck
	// Again is, for a finished task with failed messages and a viewer who
	// may replay, the form that replays those still pending again through
	// the confirmation, its options starting from this task's.
	Again *againForm
}

// replayError is one reason, with the link to its messages and what to
// do about it.
type replayError struct {
	store.ReplayErrorCount
	Href, Advice string
}

// againForm replays a task's failed messages again: all pending messages
// the task failed to publish (Fields, the filter's f_ fields), with the
// task's target and rate filled in.
type againForm struct {
	Fields  [][2]string
	Back    string
	Options replayOptions
}

// replayOptions fills in the replay options (partials.html).
type replayOptions struct {
	Exchange, RoutingKey string
	Rate                 int64
}

// handleReplay answers a task's page; to htmx, the part of it that
// changes while it runs (part=detail), or its row of the replays list.
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
	tv := c.viewTasks(r, t)[0]
	v := c.newView(sessionFrom(r.Context()), "replays", "Replay "+strconv.FormatInt(id, 10), nil)
	if r.Header.Get("HX-Request") == "true" && r.URL.Query().Get("part") != "detail" {
		c.renderFragment(w, r, "replays", "replay-row", rowData{T: tv, CSRF: v.CSRF, CanCancel: v.Can.Cancel, Poll: true})
		return
	}
	d := replayData{T: tv, CSRF: v.CSRF, CanCancel: v.Can.Cancel}
	errs, rest, err := c.cfg.Ops.ReplayErrors(r.Context(), c.caller(r), id, 20)
	if err != nil {
		c.renderFailure(w, r, "read the replay's errors", err)
		return
	}
	d.Rest = rest
	for _, e := range errs {
		f := store.Filter{Status: "all", ReplayTask: id, ReplayOutcome: e.Outcome, ReplayError: e.Error}
		d.Errors = append(d.Errors, replayError{ReplayErrorCount: e, Href: "/ui/messages?" + formOf(f).values("").Encode(),
			Advice: ops.ReplayErrorAdvice(e.Error)})
	}
	if t.Failed > 0 {
		d.FailedHref = "/ui/messages?" + formOf(store.Filter{Status: "all", ReplayTask: id, ReplayOutcome: store.OutcomeFailed}).values("").Encode()
		// An edit's task published a corrected copy: its failed message
		// is the original, and replaying it again would send the
		// uncorrected body. The page sends the viewer back to the edit.
		if tv.Finished && v.Can.Replay && t.EditOf == 0 {
			d.Again = againOf(t)
		}
	}
	if t.Status == store.TaskScheduled {
		d.Target = c.checkTarget(r.Context(), r, c.caller(r), t.Request.Target)
	}
	if r.Header.Get("HX-Request") == "true" {
		c.renderFragment(w, r, "replay", "replay-detail", d)
		return
	}
	v.Data = d
	c.renderView(w, r, http.StatusOK, "replay", "layout", v)
}

// againOf is the form that replays task t's failed messages again: those
// it failed to publish that are pending still (a later replay, an
// acknowledge or a delete may have taken some), through the normal
// confirmation, starting from t's target and rate (rounded up to the
// form's whole messages per second), which the operator may change
// first: a failure is often the target's.
func againOf(t replay.Task) *againForm {
	f := store.Filter{Status: store.StatusPending, ReplayTask: t.ID, ReplayOutcome: store.OutcomeFailed}
	a := &againForm{Fields: formOf(f).Fields(), Back: "/ui/replays/" + strconv.FormatInt(t.ID, 10),
		Options: replayOptions{Rate: int64(math.Ceil(t.Request.RatePerSecond))}}
	if tg := t.Request.Target; tg != nil {
		a.Options.Exchange, a.Options.RoutingKey = tg.Exchange, tg.RoutingKey
	}
	return a
}
