package console_test

import (
	"context"
	"strconv"
	"strings"
	"testing"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// TestBrowserFailedReplayOffersWhatToDo: a replay to an exchange that
// does not exist fails every message. Its group's page names the reason
// and what to do; its own page says what to do beside the reason, and
// offers to replay the failed messages again through the confirmation,
// with the replay's target filled in to be corrected; corrected, they are
// delivered.
func TestBrowserFailedReplayOffersWhatToDo(t *testing.T) {
	t.Parallel()
	q, app := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ids := b.seed(t, many(2, q)...)
	ctx := context.Background()
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	missing := dlqtest.Name(t, "walk.nope")
	failed, err := b.ops.StartReplay(ctx, admin, ops.ReplayRequest{Request: replay.Request{IDs: ids, RatePerSecond: 7,
		Target: &replay.Target{Exchange: missing, RoutingKey: q}}})
	require.NoError(t, err)
	require.Equal(t, int64(2), b.waitFinished(t, failed.ID).Failed)
	groups, err := b.ops.Groups(ctx, admin, store.GroupQuery{SourceQueue: q})
	require.NoError(t, err)
	require.Len(t, groups, 1)

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/groups/"+groups[0].ID)
	reason := strings.Join(tb.texts(t, `[data-test="group-last-reason"]`), " ")
	require.Contains(t, reason, `Why (2 messages`, "the last replay's reason, on the group's page")
	require.Contains(t, reason, `exchange "`+missing+`" does not exist`)
	require.Contains(t, reason, "Check the target's name, or declare the exchange first.")

	tb.open(t, "/ui/replays/"+idString(failed.ID))
	require.Equal(t, []string{"Check the target's name, or declare the exchange first."}, tb.texts(t, `[data-test="replay-error-advice"]`))
	again := `[data-test="replay-again"]`
	require.Equal(t, 1, tb.count(t, again+` details.options[open]`), "the replay options are open")
	value := func(name string) string {
		return get(t, tb, chromedp.Evaluate[string](`document.querySelector('`+again+` input[name="`+name+`"]').value`))
	}
	require.Equal(t, missing, value("target_exchange"), "the failed replay's target, to correct")
	require.Equal(t, q, value("target_routing_key"))
	require.Equal(t, "7", value("rate"))
	// Corrected: to each message's source.
	tb.do(t, chromedp.Evaluate[chromedp.Void](`document.querySelector('`+again+` input[name="target_exchange"]').value = "";`+
		`document.querySelector('`+again+` input[name="target_routing_key"]').value = ""`))
	tb.submit(t, `[data-test="replay-again-submit"]`)
	require.Equal(t, "Replay 2 messages?", get(t, tb, chromedp.Text(chromedp.CSS(`main h1`))))
	require.Contains(t, strings.Join(tb.texts(t, `[data-test="confirm-selection"]`), " "), "of replay "+idString(failed.ID)+" that it settled failed")
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "Replay started")
	require.Equal(t, "/ui/replays/"+idString(failed.ID), get(t, tb, chromedp.Evaluate[string](`location.pathname`)))

	var again2 int64
	for _, id := range tb.attrs(t, `[data-test="flash"] a[href^="/ui/replays/"]`, "href") {
		again2, err = strconv.ParseInt(strings.TrimPrefix(id, "/ui/replays/"), 10, 64)
		require.NoError(t, err)
	}
	require.Equal(t, replay.OutcomeAllPublished, b.waitFinished(t, again2).Outcome)
	require.ElementsMatch(t, ids, arrivedIDs(t, app, q), "delivered once the target was corrected")
	tb.quiet(t)
}
