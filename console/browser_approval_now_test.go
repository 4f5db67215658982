package console_test

import (
	"context"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// TestBrowserApprovalCountsWhatStillQualifies: a replay of 9 messages
// waits for approval; 3 of them are acknowledged meanwhile. The
// approver's pages (the request's own and the list) say that 9 were
// requested and 6 would still be replayed now, why the others would be
// skipped, and mark the examples that no longer qualify.
func TestBrowserApprovalCountsWhatStillQualifies(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 2 })
	ids := b.seed(t, many(9, "orders")...)
	op := newTab(t, b)
	op.signIn(t, tokOp)
	op.open(t, "/ui/groups")
	op.submit(t, `[data-test="group-replay"]`)
	op.submit(t, `[data-test="confirm"]`)
	require.Contains(t, op.flash(t), "Waiting for approval by admin")
	links := op.attrs(t, `[data-test="flash"] a[href^="/ui/approvals/"]`, "href")
	require.Len(t, links, 1)

	// The newest three, which the request's examples show, are
	// acknowledged by someone else before the admin looks.
	_, err := b.st.Acknowledge(context.Background(), store.Filter{IDs: ids[6:], Status: "all"},
		store.Actor{Name: "someone", Via: "api"}, store.ActionOptions{Confirm: true})
	require.NoError(t, err)

	admin := newTab(t, b)
	admin.signIn(t, tokAdmin)
	for _, page := range []string{links[0], "/ui/approvals"} {
		admin.open(t, page)
		row := strings.Join(admin.texts(t, `[data-test="approval-row"]`), " ")
		require.Contains(t, row, "replay of 9 messages requested", page)
		require.Equal(t, []string{"6"}, admin.attrs(t, `[data-test="approval-now"]`, "data-count"), page)
		require.Equal(t, []string{"6 would still be replayed now"}, admin.texts(t, `[data-test="approval-now"]`), page)
		require.Contains(t, row, "would be skipped: 3 not pending any more", page)
		stale := admin.texts(t, `[data-test="sample-stale"]`)
		require.Len(t, stale, 3, "%s: the acknowledged examples are marked", page)
		for _, s := range stale {
			require.Contains(t, s, "acknowledged now")
		}
	}
	admin.submit(t, `[data-test="approve"]`)
	require.Contains(t, admin.flash(t), "is approved")
	op.quiet(t)
	admin.quiet(t)
}
