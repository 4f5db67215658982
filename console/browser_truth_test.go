package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Pages that must not state untrue things: a group replayed by a replay
// that did not name it, a death count the timeline contradicts, a
// decided request's or a cancelled task's time still to come, and a link
// to a deleted message.

// diedAgain stores n messages rejected by their application's queue, one
// failure group, replays them with a queue-wide replay (its filter names
// the queue, not the group), has the application reject them again and
// stores their return. It returns the bundle, the queue, the ids and the
// replay.
func diedAgain(t *testing.T, n int) (*bundle, string, []int64, replay.Task) {
	t.Helper()
	app := dlqtest.Dial(t)
	appQueue, dlqQueue := deadLetterQueue(t, app)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ch := dlqtest.Channel(t, app)
	for i := range n {
		require.NoError(t, ch.PublishWithContext(context.Background(), "", appQueue, false, false,
			amqp.Publishing{ContentType: "application/json", Body: []byte(`{"order":"A-` + strconv.Itoa(i) + `"}`),
				Headers: amqp.Table{"x-exception-type": "OrderError"}}))
	}
	dlqtest.RejectAll(t, app, appQueue, n)
	for range n {
		b.ingestFrom(t, app, dlqQueue)
	}
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	task, err := b.ops.StartReplay(context.Background(), admin, ops.ReplayRequest{Request: replay.Request{
		Filter: &store.Filter{SourceQueue: appQueue}}})
	require.NoError(t, err)
	require.Equal(t, replay.OutcomeAllPublished, b.waitFinished(t, task.ID).Outcome)
	dlqtest.RejectAll(t, app, appQueue, n) // the application rejects them again
	for range n {
		b.ingestFrom(t, app, dlqQueue)
	}
	rows, err := b.db.Query(context.Background(), `SELECT id FROM dead_messages WHERE status = 'pending' AND replay_count = 1 ORDER BY id`)
	require.NoError(t, err)
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	require.NoError(t, err)
	require.Len(t, ids, n, "every message died again")
	return b, appQueue, ids, task
}

// TestBrowserGroupReplayedByItsQueue: a failure group whose messages a
// queue-wide replay published, and which died again, names that replay
// as its last (linked, with its outcome), and warns that they failed
// again, with how many and after which replay; it does not say it was not
// replayed.
func TestBrowserGroupReplayedByItsQueue(t *testing.T) {
	t.Parallel()
	b, _, ids, task := diedAgain(t, 2)
	var gid int64
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT group_id FROM dead_messages WHERE id = $1`, ids[0]).Scan(&gid))
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/groups/"+store.FormatGroupID(gid))
	replayHref := "/ui/replays/" + idString(task.ID)
	require.Equal(t, []string{replayHref}, tb.attrs(t, `[data-test="group-last-replay"] a`, "href"), "the queue-wide replay is its last")
	require.Equal(t, []string{"all_published"}, tb.attrs(t, `[data-test="group-last-replay"] [data-test="replay-status"]`, "data-outcome"))
	require.NotContains(t, strings.Join(tb.texts(t, `main`), " "), "not replayed")
	again := tb.texts(t, `[data-test="failed-again"]`)
	require.Len(t, again, 1, "failed again")
	require.Contains(t, again[0], "2 pending messages of this group were replayed and died again")
	require.Equal(t, []string{replayHref}, tb.attrs(t, `[data-test="failed-again-replay"]`, "href"), "after that replay")

	tb.submit(t, `[data-test="failed-again"] a[href^="/ui/messages"]`)
	require.ElementsMatch(t, ids, tb.rowIDs(t), "the link lists the messages that died again")
	tb.quiet(t)
}

// TestBrowserDeathCountAfterReplay: a message replayed and dead again
// counts, in its summary, the deaths its timeline shows (the broker's
// x-death count started again at 1 after the replay).
func TestBrowserDeathCountAfterReplay(t *testing.T) {
	t.Parallel()
	b, _, ids, _ := diedAgain(t, 1)
	var brokerCount int64
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT death_count FROM dead_messages WHERE id = $1`, ids[0]).Scan(&brokerCount))
	require.EqualValues(t, 1, brokerCount, "the broker counts one death since the replay")
	tb := newTab(t, b)
	tb.signIn(t, tokViewer)
	tb.open(t, "/ui/messages/"+idString(ids[0]))
	deaths := tb.count(t, `[data-test="death-row"]`)
	require.Equal(t, 2, deaths, "the timeline shows two deaths")
	require.NotContains(t, strings.Join(tb.texts(t, `dl.facts`), " "), "(1 death in its queue)", "not what the broker counted alone")
	require.Equal(t, []string{strconv.Itoa(deaths)}, tb.attrs(t, `[data-test="death-count"]`, "data-count"), "the summary counts as many")
	summary := strings.Join(tb.texts(t, `[data-test="death-count"]`), " ")
	require.Equal(t, "2 deaths in its queue", summary)
	tb.quiet(t)
}

// TestBrowserDecidedIsNotPending: a decided request shows its decision
// (who, when) where a pending one shows its expiry, on the list and on its
// page, with no time to come; a replay cancelled before its start time
// says it never started, not that it starts in a few minutes.
func TestBrowserDecidedIsNotPending(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1 })
	ids := b.seed(t, many(2, "orders")...)
	op := b.signIn(t, tokOp)
	request := func() string {
		t.Helper()
		r := op.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {"orders"},
			"max_id": {idString(ids[1])}, "back": {"/ui/messages"}})
		require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
		var id int64
		require.NoError(t, b.db.QueryRow(context.Background(), `SELECT max(id) FROM approvals`).Scan(&id))
		return idString(id)
	}
	approved, withdrawn, pending := request(), request(), request()
	r := b.signIn(t, tokAdmin).act(t, "/ui/approvals/"+approved, url.Values{"decision": {"approve"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	r = op.act(t, "/ui/approvals/"+withdrawn, url.Values{"decision": {"withdraw"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)

	tb := newTab(t, b)
	tb.signIn(t, tokViewer)
	row := func(id string) string { return `[data-test="approval-row"][data-id="` + id + `"]` }
	for _, page := range []string{"/ui/approvals", "/ui/approvals/" + approved} {
		tb.open(t, page)
		require.NotContains(t, strings.Join(tb.texts(t, row(approved)), " "), "(in ", "%s: nothing of it is to come", page)
		decision := tb.texts(t, row(approved)+` [data-test="approval-decision"]`)
		require.Len(t, decision, 1, page)
		require.Contains(t, decision[0], "approved by admin", page)
		require.Zero(t, tb.count(t, row(approved)+` [data-test="approval-expires"]`), page)
	}
	tb.open(t, "/ui/approvals")
	require.NotContains(t, strings.Join(tb.texts(t, row(withdrawn)), " "), "(in ")
	require.Contains(t, tb.texts(t, row(withdrawn)+` [data-test="approval-decision"]`)[0], "withdrawn by ops")
	require.Contains(t, tb.texts(t, row(pending)+` [data-test="approval-expires"]`)[0], "(in ", "a pending request shows its expiry")

	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	start := time.Now().Add(10 * time.Minute)
	later := b.seed(t, many(1, "billing")...)
	task, err := b.ops.StartReplay(context.Background(), admin, ops.ReplayRequest{Request: replay.Request{IDs: later, StartAt: &start}})
	require.NoError(t, err)
	facts := func() string { return strings.Join(tb.texts(t, `[data-test="replay-detail"] dl.facts`), " ") }
	tb.open(t, "/ui/replays/"+idString(task.ID))
	require.Regexp(t, `starts [^;]*\(in \d+ min\)`, facts(), "scheduled: it starts")
	_, err = b.ops.CancelReplay(context.Background(), admin, task.ID)
	require.NoError(t, err)
	tb.open(t, "/ui/replays/"+idString(task.ID))
	require.NotContains(t, facts(), "(in ", "no start to come")
	timing := strings.Join(tb.texts(t, `[data-test="replay-timing"]`), " ")
	require.Contains(t, timing, "never started")
	require.Contains(t, timing, "cancelled")
	tb.quiet(t)
}

// TestBrowserDeletedMessageLink: after a delete, the audit's link "up to
// message #N" and a deleted message's own address answer 404 with a
// page that says the message was deleted, by whom and with which
// selection, and links back to the messages.
func TestBrowserDeletedMessageLink(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	admin := b.signIn(t, tokAdmin)
	r := admin.act(t, "/ui/act", url.Values{"action": {"delete"}, "id": {idString(ids[0])}, "back": {"/ui/messages"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	r = admin.act(t, "/ui/act", url.Values{"action": {"delete"}, "all": {"1"}, "f_source_queue": {"orders"},
		"max_id": {idString(ids[2])}, "back": {"/ui/messages"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	for id, s := range b.statuses(t, ids) {
		require.Equal(t, "gone", s, "message %d", id)
	}

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/audit?action=delete")
	link := `[data-test="audit-selection"] a[href="/ui/messages/` + idString(ids[2]) + `"]`
	require.Equal(t, 1, tb.count(t, link), "the audit links up to message #%d", ids[2])
	require.Equal(t, int64(http.StatusNotFound), tb.submit(t, link))
	require.Equal(t, "Message "+idString(ids[2])+" was deleted", tb.texts(t, `main h1`)[0])
	by := tb.texts(t, `[data-test="message-gone-by"]`)
	require.Len(t, by, 1)
	require.Contains(t, by[0], "by admin")
	require.Contains(t, by[0], "a delete of pending messages of queue orders")
	require.Equal(t, []string{"/ui/messages"}, tb.attrs(t, `[data-test="message-gone-back"]`, "href"))

	tb.open(t, "/ui/messages/"+idString(ids[0]))
	require.Equal(t, "Message "+idString(ids[0])+" was deleted", tb.texts(t, `main h1`)[0])
	by = tb.texts(t, `[data-test="message-gone-by"]`)
	require.Len(t, by, 1)
	require.True(t, strings.HasPrefix(by[0], "Deleted by admin"), "deleted by id, named in the audit: %s", by[0])

	viewer := newTab(t, b)
	viewer.signIn(t, tokViewer)
	viewer.open(t, "/ui/messages/"+idString(ids[0]))
	require.Equal(t, "Message "+idString(ids[0])+" is not stored", viewer.texts(t, `main h1`)[0], "a viewer may not read the audit")
	require.Equal(t, 1, viewer.count(t, `[data-test="message-gone-back"]`))
	quietBut404(t, tb)
	quietBut404(t, viewer)
}

// quietBut404 is quiet for a tab that loaded pages answered with 404, of
// which the browser logs each as an error: nothing else alarming happened.
func quietBut404(t *testing.T, tb *tab) {
	t.Helper()
	tb.mu.Lock()
	defer tb.mu.Unlock()
	for _, a := range tb.alarms {
		require.Contains(t, a, "the server responded with a status of 404", "the page raised dialogs, errors or CSP reports")
	}
}
