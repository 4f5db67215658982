package api_test

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// TestReplayThroughRealService replays through the real replay service and
// RabbitMQ: the messages arrive on the target queue, their status follows,
// and the task is visible through the API.
func TestReplayThroughRealService(t *testing.T) {
	t.Parallel()
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	target := dlqtest.Name(t, "target")
	_, err := ch.QueueDeclare(target, true, false, false, false, nil)
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, target)

	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "api-test"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)

	b := setup(t, replayer(t, conn))

	ids := b.seed(t, many("orders", 3)...)
	r := b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{
		"ids": ids[:2], "target": map[string]any{"exchange": "", "routing_key": target},
	})
	require.Contains(t, []int{http.StatusAccepted, http.StatusOK}, r.status, "%s", r.body)
	var task struct {
		ID int64 `json:"id"`
	}
	r.json(t, &task)
	dlqtest.Eventually(t, 20*time.Second, func() bool { return dlqtest.QueueDepth(t, app, target) == 2 }, "2 messages on %s", target)
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		r := b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", ids[0]), tokViewer, nil)
		var m store.Message
		r.json(t, &m)
		return m.Status == "replayed"
	}, "message %d replayed", ids[0])
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/replays/%d", task.ID), tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	b.requireCounters(t)

	// A message being replayed cannot be acknowledged or deleted (409)...
	// covered with a claimed row in TestAcknowledgeAndDelete; here: a
	// replay request the service refuses is a 400.
	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": ids[2:], "rate_per_second": -5})
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": ids[2:], "on_unknown": "twice"})
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `on_unknown \"twice\" must be \"retry\"`, "the error names the field and the values")
	// Audit rows from the replay service for the replay.
	require.Positive(t, b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'replay'`))
}

// TestReplayScopeAndConfirm replays through the real replay service and
// RabbitMQ as a token scoped to one queue: a filter naming another queue
// is 403, another queue's message id is 404, and a filter naming no queue
// replays only the token's queue. A replay by filter above the threshold
// needs confirm: true, like acknowledge and delete. Each replay writes one
// audit row carrying the request id and the actor's scope.
func TestReplayScopeAndConfirm(t *testing.T) {
	t.Parallel()
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	target := dlqtest.Name(t, "target")
	_, err := ch.QueueDeclare(target, true, false, false, false, nil)
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, target)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "api-test"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)

	b := setup(t, replayer(t, conn), func(o *setupOpts) { o.confirmAbove = 2 })

	orders := b.seed(t, many("orders", 3)...)
	billing := b.seed(t, many("billing", 2)...)
	to := map[string]any{"exchange": "", "routing_key": target}

	// Outside the scope: 403 for a filter, 404 for ids; nothing recorded.
	r := b.do(t, "POST", "/api/v1/replays", tokScoped, map[string]any{"filter": map[string]any{"source_queue": "billing"}, "target": to})
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)
	require.Contains(t, r.errMessage(t), "billing")
	for _, ids := range [][]int64{{billing[0]}, {orders[0], billing[1]}} {
		r = b.do(t, "POST", "/api/v1/replays", tokScoped, map[string]any{"ids": ids, "target": to})
		require.Equal(t, http.StatusNotFound, r.status, "%v: %s", ids, r.body)
		require.Contains(t, r.errMessage(t), fmt.Sprint(ids[len(ids)-1]))
	}

	// Above the threshold (3 pending orders > 2): confirm required, with
	// the count and the threshold; a dry run needs none.
	all := map[string]any{"filter": map[string]any{"status": "pending"}, "target": to}
	r = b.do(t, "POST", "/api/v1/replays", tokScoped, all)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Equal(t, "confirm_required", r.errCode(t))
	require.Contains(t, r.errMessage(t), "more than 2 messages (at least 3)")
	r = b.do(t, "POST", "/api/v1/replays", tokScoped, map[string]any{"filter": map[string]any{"status": "pending"}, "target": to, "dry_run": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var task replay.Task
	r.json(t, &task)
	require.EqualValues(t, 3, task.Requested, "the scope narrows the dry run too")
	require.Zero(t, b.count(t, `SELECT count(*) FROM replay_tasks`))
	require.Zero(t, b.count(t, `SELECT count(*) FROM audit_log`))

	// Confirmed: only the token's queue is replayed.
	all["confirm"] = true
	r = b.do(t, "POST", "/api/v1/replays", tokScoped, all)
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	scopedRequest := r.header.Get("X-Request-Id")
	r.json(t, &task)
	waitTask(t, b, task.ID, tokScoped)
	require.Equal(t, 3, dlqtest.QueueDepth(t, app, target))
	require.EqualValues(t, 3, b.count(t, `SELECT count(*) FROM dead_messages WHERE source_queue = 'orders' AND status = 'replayed'`))
	require.EqualValues(t, 2, b.count(t, `SELECT count(*) FROM dead_messages WHERE source_queue = 'billing' AND status = 'pending'`))

	// A limit at or under the threshold needs no confirm.
	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"filter": map[string]any{"source_queue": "billing"}, "limit": 1, "target": to})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	opRequest := r.header.Get("X-Request-Id")
	r.json(t, &task)
	waitTask(t, b, task.ID, tokOp)
	require.Equal(t, 4, dlqtest.QueueDepth(t, app, target))

	// One audit row per replay, with request id and scope.
	rows, err := b.db.Query(t.Context(), `SELECT request_id, actor, scope, count FROM audit_log WHERE action = 'replay' ORDER BY id`)
	require.NoError(t, err)
	type audit struct {
		rid, actor string
		scope      []string
		count      int64
	}
	var got []audit
	for rows.Next() {
		var a audit
		require.NoError(t, rows.Scan(&a.rid, &a.actor, &a.scope, &a.count))
		got = append(got, a)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, []audit{{scopedRequest, "orders-ops", []string{"orders"}, 3}, {opRequest, "ops", nil, 1}}, got)
	require.EqualValues(t, 2, b.count(t, `SELECT count(*) FROM audit_log`), "nothing else was audited")
	b.requireCounters(t)
}

// waitTask polls a replay task over the API until it completes.
func waitTask(t *testing.T, b *bundle, id int64, token string) {
	t.Helper()
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		r := b.do(t, "GET", fmt.Sprintf("/api/v1/replays/%d", id), token, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var task replay.Task
		r.json(t, &task)
		require.NotContains(t, []string{replay.StatusFailed, replay.StatusCancelled}, task.Status, "%s", r.body)
		return task.Status == replay.StatusCompleted
	}, "replay task %d completed", id)
}
