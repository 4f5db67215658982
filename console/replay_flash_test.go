package console_test

import (
	"context"
	"net/http"
	"net/url"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

var countedRe = regexp.MustCompile(`name="counted" value="(\d+)"`)

// TestReplayFlashSaysWhenAndWhetherItPublishes: a replay with a delay is
// "Scheduled:" with its start time, not "Done: Replay started"; one whose
// every message would be skipped says it publishes nothing, and why; one
// that starts now and may publish is "Done: Replay started".
func TestReplayFlashSaysWhenAndWhetherItPublishes(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(3, "orders")...)
	c := b.signIn(t, tokOp)
	// As the browser does: the confirmation, then its form as it posts it.
	replayOf := func(id int64, delay string) string {
		t.Helper()
		page := c.confirmPage(t, url.Values{"action": {"replay"}, "id": {idString(id)}, "delay": {delay}, "back": {"/ui/replays"}}).text
		form := url.Values{"action": {"replay"}, "id": {idString(id)}, "delay": {delay}, "back": {"/ui/replays"}}
		if m := countedRe.FindStringSubmatch(page); m != nil {
			form.Set("counted", m[1]) // what the confirmation counted
		}
		r := c.act(t, "/ui/act", form)
		require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
		return flashWords(c.follow(t, r).text)
	}

	flash := replayOf(ids[0], "300")
	require.True(t, strings.HasPrefix(flash, "Scheduled: Replay scheduled: replay "), flash)
	require.Contains(t, flash, ", 1 message requested, to start at ")
	require.Contains(t, flash, " UTC (in 5 min). Nothing is published before then")

	_, err := b.ops.Acknowledge(context.Background(), ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole},
		ops.ActionRequest{IDs: ids[1:2]})
	require.NoError(t, err)
	flash = replayOf(ids[1], "0")
	require.True(t, strings.HasPrefix(flash, "Note: Nothing to publish: replay "), "the confirmation counted none: %s", flash)
	require.Contains(t, flash, "skips all 1 message (1 not pending any more): it ends without publishing any.")

	flash = replayOf(ids[2], "0")
	require.True(t, strings.HasPrefix(flash, "Done: Replay started: replay "), flash)
	require.Contains(t, flash, ", 1 message requested.")
}

// TestConfirmNamesTheDefaultExchange: a replay given a routing key and no
// exchange goes through the default exchange; the confirmation says so in
// words (the queue it reaches) and warns when no queue of that name
// exists, since every message would come back unroutable; the task's
// page names it the same way.
func TestConfirmNamesTheDefaultExchange(t *testing.T) {
	t.Parallel()
	q, _ := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ids := b.seed(t, many(1, q)...)
	c := b.signIn(t, tokOp)
	confirm := func(routingKey string) string {
		t.Helper()
		return c.confirmPage(t, url.Values{"action": {"replay"}, "id": {idString(ids[0])}, "target_routing_key": {routingKey},
			"back": {"/ui/messages/" + idString(ids[0])}}).text
	}
	nowhere := dlqtest.Name(t, "walk.no-queue")
	page := confirm(nowhere)
	require.Equal(t, `the default exchange with routing key "`+nowhere+`", which routes only to the queue named "`+nowhere+`"`,
		testText(page, "confirm-target"))
	require.NotContains(t, words(page), `exchange ""`)
	warn := testText(page, "target-missing")
	require.Contains(t, warn, `No queue named "`+nowhere+`" exists on the broker, and the default exchange delivers only there: nothing would be published.`)
	require.Contains(t, warn, "Check the routing key, declare the queue first, or give the exchange to publish to.")

	page = confirm(q)
	require.Contains(t, testText(page, "confirm-target"), `which routes only to the queue named "`+q+`"`)
	require.Empty(t, testText(page, "target-missing"), "the queue exists")

	r := c.act(t, "/ui/act", url.Values{"action": {"replay"}, "id": {idString(ids[0])}, "target_routing_key": {q}, "back": {"/ui/replays"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	tasks, err := b.ops.ListReplays(context.Background(), ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}, 1)
	require.NoError(t, err)
	require.Len(t, tasks, 1)
	page = c.get(t, "/ui/replays/"+idString(tasks[0].ID)).text
	require.Equal(t, `the default exchange with routing key "`+q+`", which routes only to the queue named "`+q+`"`, testText(page, "replay-to"))
}

// TestDeleteFromMessagePageReturnsToItsQueue: deleting from a message's
// page returns to its queue's listing, and the flash names the message,
// linked to the page that says it was deleted.
func TestDeleteFromMessagePageReturnsToItsQueue(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	c := b.signIn(t, tokAdmin)
	id := idString(ids[0])
	r := c.act(t, "/ui/act", url.Values{"action": {"delete"}, "id": {id}, "back": {"/ui/messages/" + id}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Equal(t, "/ui/messages?source_queue=orders", r.Header.Get("Location"))
	r = c.follow(t, r)
	require.Equal(t, "Done: Deleted 1 message: message "+id+".", flashWords(r.text))
	require.Contains(t, r.text, `<a href="/ui/messages/`+id+`">message `+id+`</a>`)
	require.Equal(t, "gone", b.statuses(t, ids)[ids[0]])
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[1]])

	gone := c.get(t, "/ui/messages/"+id)
	require.Equal(t, http.StatusNotFound, gone.StatusCode)
	require.Contains(t, words(gone.text), "Message "+id+" was deleted", "the link leads to what became of it")
}
