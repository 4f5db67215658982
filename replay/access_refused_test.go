package replay_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
)

// restrictedUser creates a RabbitMQ user that may configure and read
// everything on vhost / but write to no exchange named forbidden, and
// returns its AMQP URL. The user is deleted when the test ends.
func restrictedUser(t *testing.T, forbidden string) string {
	t.Helper()
	user := dlqtest.Name(t, "u")
	var pw [12]byte
	_, _ = rand.Read(pw[:])
	pass := hex.EncodeToString(pw[:])
	dlqtest.RunRabbitmqctl(t, 30*time.Second, "add_user", user, pass)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if out, err := dlqtest.Rabbitmqctl(ctx, "delete_user", user).CombinedOutput(); err != nil {
			t.Errorf("delete user %s: %v: %s", user, err, out)
		}
	})
	dlqtest.RunRabbitmqctl(t, 30*time.Second, "set_permissions", "-p", "/", user,
		".*", "^(?!"+regexp.QuoteMeta(forbidden)+"$).*", ".*")
	u, err := url.Parse(dlqtest.AMQPURL())
	require.NoError(t, err)
	u.User = url.UserPassword(user, pass)
	return u.String()
}

// A target exchange dlq's user may not write to (403 ACCESS_REFUSED, which
// closes the publishing channel): nothing sent there is marked replayed,
// every such row is pending again, failed with the refusal in
// last_replay_error (the refusal names the exchange: the broker routed none
// of them, so none is an unknown outcome to send again), and a task
// replaying to an allowed target at the same time, over the same
// connection, is untouched: a channel error stays on its channel.
func TestReplayAccessRefusedTarget(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noService, o.noConsumer = true, true })

	// The forbidden exchange exists (declared as guest) and routes to a
	// queue: only the permission stands in the way.
	forbidden := dlqtest.Name(t, "deny")
	dlqtest.DeleteExchanges(t, b.app, forbidden)
	require.NoError(t, b.ch.ExchangeDeclare(forbidden, "topic", true, false, false, false, nil))
	behind := b.targetQueue(t)
	require.NoError(t, b.ch.QueueBind(behind, "#", forbidden, false, nil))
	allowed := b.targetQueue(t)

	const n = 100
	refusedIDs := b.seed(t, dlqtest.Name(t, "src"), n)
	allowedIDs := b.seed(t, allowed, n) // through the default exchange, back to allowed

	// dlq replays as the restricted user.
	conn, err := broker.NewConn(broker.ConnConfig{URL: restrictedUser(t, forbidden), Name: "dlq-replay-test-restricted"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	b.conn = conn
	b.svc = b.newService(t, setupOpts{lease: 3 * time.Second, batchSize: 100}, prometheus.NewRegistry())
	b.run(t, b.svc)

	ctx := context.Background()
	refused, err := b.svc.Start(ctx, replay.Request{IDs: refusedIDs, Target: &replay.Target{Exchange: forbidden, RoutingKey: "k"}}, operator)
	require.NoError(t, err)
	ok, err := b.svc.Start(ctx, replay.Request{IDs: allowedIDs}, operator)
	require.NoError(t, err)

	refused = b.waitTask(t, refused.ID, 60*time.Second, replay.StatusCompleted)
	ok = b.waitTask(t, ok.ID, 60*time.Second, replay.StatusCompleted)
	t.Logf("refused task: published %d, unknown %d, failed %d, republished %d", refused.Published, refused.Unknown, refused.Failed, refused.Republished)

	// The refused task: nothing published, nothing left claimed, every row
	// pending again and failed. A publish that reached the channel after
	// the refusal closed it was never sent: the task sent it again, and
	// the broker refused that one too.
	require.Zero(t, refused.Published)
	require.Equal(t, int64(n), refused.Failed)
	require.Zero(t, refused.Unknown+refused.Republished, "a refusal is not an unknown outcome")
	require.Zero(t, refused.Remaining)
	require.Zero(t, b.count(t, "id = ANY($1) AND status <> 'pending'", refusedIDs), "rows not back to pending")
	require.Zero(t, b.count(t, "id = ANY($1) AND (replayed_at IS NOT NULL OR replay_count <> 0)", refusedIDs))
	require.Equal(t, n, b.count(t, "id = ANY($1) AND last_replay_error LIKE 'refused: 403 ACCESS_REFUSED%'", refusedIDs),
		"every row names the refusal")
	var why string
	require.NoError(t, b.db.QueryRow(ctx, `SELECT last_replay_error FROM dead_messages WHERE id = $1`, refusedIDs[0]).Scan(&why))
	require.Contains(t, why, "access to exchange '"+forbidden+"'", "the first publish names what was refused")
	require.Zero(t, dlqtest.QueueDepth(t, b.app, behind), "nothing got through the forbidden exchange")

	// The allowed task, publishing at the same time on its own channel of
	// the same connection, is untouched.
	require.Equal(t, int64(n), ok.Published)
	require.Zero(t, ok.Unknown+ok.Failed+ok.Skipped)
	require.Equal(t, n, b.count(t, "id = ANY($1) AND status = 'replayed' AND replay_count = 1 AND last_replay_error IS NULL", allowedIDs))
	per := b.countAtTarget(t, allowed)
	require.Len(t, per, n)
	for id, k := range per {
		require.Equal(t, 1, k, "message %d arrived %d times", id, k)
	}
	b.requireSummaryExact(t)
}
