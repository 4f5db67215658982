package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMessagePageSaysNoRunnerTookTheEdit: with no replay service running
// (setup's replay service never runs), an edit's copy waits for ever; once
// its task has waited past the time a runner takes one, the message's page
// says that no instance took it and what to check, instead of "being
// sent" with no end. It keeps following it: a runner may still come.
func TestMessagePageSaysNoRunnerTookTheEdit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := strconv.FormatInt(b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A"}`)})[0], 10)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/messages/"+id+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)

	page := op.get(t, "/ui/messages/"+id).text
	require.Contains(t, page, "its corrected copy is being sent: this page follows it", "just asked: a runner takes it moments later")
	require.NotContains(t, page, "no dlq instance has taken")

	// A minute untaken (the test's own schema holds this task only).
	_, err := b.db.Exec(context.Background(), `UPDATE replay_tasks SET created_at = created_at - interval '1 minute',
		start_at = start_at - interval '1 minute' WHERE edit IS NOT NULL`)
	require.NoError(t, err)
	page = op.get(t, "/ui/messages/"+id).text
	require.Regexp(t, `its corrected copy waits: no dlq instance has taken its task, replay \d+, in the 1m( \d+s)? since it could start \(check that a dlq serve of this version is up`, page)
	require.Contains(t, page, "this page follows it", "still followed: the copy goes out once a runner comes")
	require.Contains(t, page, `data-state="in_progress"`)
}

// TestMessagePageStopsFollowingADroppedCopyNoRunnerTook: an original
// acknowledged before its edit's task took it will not send its copy;
// the page follows it only until the task records that. When no runner
// takes the task, nothing on the page can change but through one: the
// page says that no instance took it and stops refreshing, instead of
// polling for ever ("this page follows it" with nothing to follow).
func TestMessagePageStopsFollowingADroppedCopyNoRunnerTook(t *testing.T) {
	t.Parallel()
	b := setup(t) // no replay runner: the copy's task waits
	id := strconv.FormatInt(b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A"}`)})[0], 10)
	page := "/ui/messages/" + id
	op := b.signIn(t, tokOp)
	r := op.act(t, page+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	r = op.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "id": {id}, "back": {page}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	refresh := func() response {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+page, nil)
		require.NoError(t, err)
		req.Header.Set("X-DLQ-Refresh", "1")
		return op.do(t, req)
	}

	r = op.get(t, page)
	require.Contains(t, r.text, `data-refresh-url="`+page+`" data-live="on"`, "just acknowledged: a runner records the copy not sent moments later")
	require.Empty(t, refresh().Header.Get("X-DLQ-Refresh-Done"))

	// A minute untaken (the test's own schema holds this task only).
	_, err := b.db.Exec(context.Background(), `UPDATE replay_tasks SET created_at = created_at - interval '1 minute',
		start_at = start_at - interval '1 minute' WHERE edit IS NOT NULL`)
	require.NoError(t, err)
	r = refresh()
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Equal(t, "1", r.Header.Get("X-DLQ-Refresh-Done"), "a page left open stops at this refresh")
	status := elementWords(r.text, "message-status")
	require.Len(t, status, 1)
	require.Regexp(t, `^acknowledged its corrected copy will not be sent \(its task skips a message no longer pending\); `+
		`no dlq instance has taken its task, replay \d+, in the 1m( \d+s)? since it could start \(check that .*\): this page no longer follows it$`, status[0])
	require.Equal(t, []string{"will not be sent: the message was acknowledged before its task took it"}, elementWords(r.text, "edit-state"))
	require.NotContains(t, op.get(t, page).text, "data-refresh-url", "loaded again, the page is not refreshed")
}
