package replay_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
)

// A message whose user_id names another user than dlq's connection (the
// application published it as "billing") replays fine by default: user_id
// is dropped. Kept (replay.keep_user_id), RabbitMQ refuses it and closes
// the channel, so nothing of it is published.
func TestReplayDropsUserIDByDefault(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer = true })
	q := b.targetQueue(t)
	ids := b.seedWith(t, q, 20, `{"delivery_mode":2,"user_id":"billing","app_id":"shop"}`)
	ctx := context.Background()

	task, err := b.svc.Start(ctx, replay.Request{IDs: ids[:10]}, operator)
	require.NoError(t, err)
	final := b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, int64(10), final.Published)
	for _, d := range b.consume(t, q, 10, 10*time.Second) {
		require.Empty(t, d.UserId)
		require.Equal(t, "shop", d.AppId, "the other properties stay")
	}

	b.stopSvc()
	// Held, not sent again: each publish would be refused again.
	keep := b.newService(t, setupOpts{lease: 3 * time.Second, batchSize: 100, keepUserID: true, onUnknown: replay.OnUnknownHold}, nil)
	b.run(t, keep)
	b.svc = keep
	task, err = keep.Start(ctx, replay.Request{IDs: ids[10:]}, operator)
	require.NoError(t, err)
	final = b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Zero(t, final.Published, "RabbitMQ refuses a foreign user_id")
	require.Equal(t, int64(10), final.Failed+final.Unknown)
	require.Equal(t, 10, b.count(t, "id = ANY($1) AND status = 'pending' AND last_replay_error IS NOT NULL", ids[10:]))
	b.requireSummaryExact(t)
}
