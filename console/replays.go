package console

import (
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"

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
}

// replayError is one reason, with the link to its messages.
type replayError struct {
	store.ReplayErrorCount
	Href string
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
		d.Errors = append(d.Errors, replayError{ReplayErrorCount: e, Href: "/ui/messages?" + formOf(f).values("").Encode()})
	}
	if t.Failed > 0 {
		d.FailedHref = "/ui/messages?" + formOf(store.Filter{Status: "all", ReplayTask: id, ReplayOutcome: store.OutcomeFailed}).values("").Encode()
	}
	if r.Header.Get("HX-Request") == "true" {
		c.renderFragment(w, r, "replay", "replay-detail", d)
		return
	}
	v.Data = d
	c.renderView(w, r, http.StatusOK, "replay", "layout", v)
}
