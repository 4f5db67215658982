package console_test

import (
	"context"
	"encoding/json"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// replayFromFlash follows the confirmation just shown and reads the task
// its flash links to.
func (tb *tab) replayFromFlash(t *testing.T) store.ReplayTask {
	t.Helper()
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "started")
	links := tb.attrs(t, `[data-test="flash"] a[href^="/ui/replays/"]`, "href")
	require.Len(t, links, 1, "the task is a link")
	id, err := strconv.ParseInt(strings.TrimPrefix(links[0], "/ui/replays/"), 10, 64)
	require.NoError(t, err)
	task, err := tb.b.st.GetReplayTask(context.Background(), id)
	require.NoError(t, err)
	return task
}

// canaryOf is a stored task's canary: its columns and its request's.
func canaryOf(t *testing.T, task store.ReplayTask) [3]any {
	t.Helper()
	var req struct {
		Canary json.RawMessage `json:"canary"`
	}
	require.NoError(t, json.Unmarshal(task.Request, &req))
	return [3]any{task.CanaryCount, task.CanaryWaitSeconds, string(req.Canary)}
}

// TestBrowserGroupReplayCanaryAsMessagesPage: Replay from a failure
// group's page and Replay from the messages page, each as it is offered,
// make tasks with the same canary settings; a group's page offers a
// canary (and the other replay options) as the messages page does; and a
// replay form that asks for a canary without its wait field (the groups
// listing's row has none) watches it as long as the messages page's field
// starts from, not 0 s.
func TestBrowserGroupReplayCanaryAsMessagesPage(t *testing.T) {
	t.Parallel()
	b := setup(t) // no replay runner: the tasks wait, as stored
	fromGroup, fromList, fromBare := dlqtest.Name(t, "group"), dlqtest.Name(t, "list"), dlqtest.Name(t, "bare")
	withCanary := dlqtest.Name(t, "canary")
	for _, q := range []string{fromGroup, fromList, fromBare, withCanary} {
		b.seed(t, many(2, q)...)
	}
	tb := newTab(t, b)
	tb.signIn(t, tokOp)

	tb.open(t, "/ui/groups?source_queue="+url.QueryEscape(fromGroup))
	groups := tb.attrs(t, `[data-test="group-row"] th a`, "href")
	require.Len(t, groups, 1)
	tb.open(t, groups[0])
	tb.submit(t, `[data-test="group-replay"]`)
	group := tb.replayFromFlash(t)

	tb.open(t, "/ui/messages?source_queue="+url.QueryEscape(fromList))
	tb.do(t, click(`[data-test="select-all-matching"]`))
	tb.submit(t, `[data-test="bulk-replay"]`)
	list := tb.replayFromFlash(t)
	require.Equal(t, canaryOf(t, list), canaryOf(t, group), "the same replay from either page")

	// A canary asked for by a form without the wait field.
	tb.open(t, "/ui/messages?source_queue="+url.QueryEscape(fromBare))
	shown := tb.attrs(t, `input[name="canary_wait"]`, "value")
	require.Len(t, shown, 1)
	wait, err := strconv.Atoi(shown[0])
	require.NoError(t, err)
	require.Positive(t, wait, "the messages page offers a canary watched for a while")
	tb.do(t, click(`[data-test="select-all-matching"]`),
		chromedp.SetValue(chromedp.CSS(`input[name="canary_count"]`), "1"),
		chromedp.Evaluate[chromedp.Void](`document.querySelector('input[name="canary_wait"]').remove()`))
	tb.submit(t, `[data-test="bulk-replay"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main`))), "1 canary message first, watched for "+shown[0]+" s")
	bare := tb.replayFromFlash(t)
	require.Equal(t, 1, bare.CanaryCount)
	require.Equal(t, wait, bare.CanaryWaitSeconds, "no wait field: the wait the messages page starts from")

	// A canary asked for on a group's page, where an on-call engineer
	// replays a failure group.
	tb.open(t, "/ui/groups?source_queue="+url.QueryEscape(withCanary))
	groups = tb.attrs(t, `[data-test="group-row"] th a`, "href")
	require.Len(t, groups, 1)
	require.Zero(t, tb.count(t, `[data-test="group-row"] input[name="canary_count"]`), "the listing's row stays one row")
	tb.open(t, groups[0])
	tb.do(t, click(`[data-test="group-replay-options"] summary`),
		chromedp.SetValue(chromedp.CSS(`[data-test="group-replay-options"] input[name="canary_count"]`), "1"),
		chromedp.SetValue(chromedp.CSS(`[data-test="group-replay-options"] input[name="canary_wait"]`), "7"))
	tb.submit(t, `[data-test="group-replay"]`)
	require.Contains(t, get(t, tb, chromedp.Text(chromedp.CSS(`main`))), "1 canary message first, watched for 7 s")
	canary := tb.replayFromFlash(t)
	require.Equal(t, 1, canary.CanaryCount)
	require.Equal(t, 7, canary.CanaryWaitSeconds)
	tb.quiet(t)
}
