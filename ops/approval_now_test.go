package ops_test

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// The list of requests refreshes itself every few seconds, so it counts
// again what approving would act on only for requests of up to 20,000
// messages in all; a larger one is counted on its own page. (Counting a
// snapshot of a million takes about a second, at every refresh.)
func TestApprovalListCountsSmallRequestsOnly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	b := newOps(t, admin, operator)
	_, err := b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "orders"}, Confirm: true})
	small := pendingOf(t, err)
	_, err = b.ops.Acknowledge(ctx, as(operator), ops.ActionRequest{Filter: &store.Filter{SourceQueue: "billing"}, Confirm: true})
	large := pendingOf(t, err)
	// The large one as if its snapshot held 30,000 messages.
	conn, err := pgx.Connect(ctx, b.dsn)
	require.NoError(t, err)
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, `UPDATE approvals SET count = 30000 WHERE id = $1`, large.ID)
	require.NoError(t, err)

	views, err := b.ops.ApprovalViews(ctx, as(admin), 10)
	require.NoError(t, err)
	require.Len(t, views, 2)
	for _, v := range views {
		switch v.ID {
		case small.ID:
			require.NotNil(t, v.Now, "a small request is counted in the list")
			require.EqualValues(t, 3, v.Now.Count)
		case large.ID:
			require.Nil(t, v.Now, "a request past the list's budget is counted on its own page only")
		}
	}
	v, err := b.ops.ApprovalViewOf(ctx, as(admin), large.ID)
	require.NoError(t, err)
	require.NotNil(t, v.Now, "its own page counts it")
	require.EqualValues(t, 3, v.Now.Count)
}
