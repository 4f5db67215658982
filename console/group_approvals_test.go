package console_test

import (
	"context"
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// TestGroupPageNamesRequestsByItsQueue: a failure group's page names a
// waiting request that selects by the group's queue (acknowledge all of
// orders), not only one that names the group, and says it selects by
// queue; a request by another queue is not named.
func TestGroupPageNamesRequestsByItsQueue(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 3 })
	orders, billing := dlqtest.Name(t, "orders"), dlqtest.Name(t, "billing")
	b.seed(t, append(many(5, orders), many(4, billing)...)...)
	ctx := context.Background()
	admin := ops.Caller{Principal: mustPrincipal(t, b, tokAdmin), Via: ops.ViaConsole}
	op := ops.Caller{Principal: mustPrincipal(t, b, tokOp), Via: ops.ViaConsole}
	gs, err := b.ops.Groups(ctx, admin, store.GroupQuery{SourceQueue: orders})
	require.NoError(t, err)
	require.Len(t, gs, 1)
	request := func(queue string) int64 {
		_, err := b.ops.Acknowledge(ctx, op, ops.ActionRequest{Filter: &store.Filter{SourceQueue: queue}, Confirm: true})
		var pa *ops.PendingApproval
		require.True(t, errors.As(err, &pa), "an approval request: %v", err)
		return pa.Approval.ID
	}
	byQueue := request(orders)
	request(billing)

	page := b.signIn(t, tokViewer).get(t, "/ui/groups/"+gs[0].ID)
	words := elementWords(page.text, "group-approval-waiting")
	require.Len(t, words, 1, "the request by the group's queue, not the other queue's:\n%s", page.text)
	require.Contains(t, page.text, `data-test="group-approval-waiting" data-id="`+idString(byQueue)+`"`)
	require.Contains(t, words[0], "A request to acknowledge 5 messages of queue "+orders+" (by queue, not by this group")
	require.Contains(t, words[0], "by ops")
}
