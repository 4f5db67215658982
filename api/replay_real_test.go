package api_test

import (
	"context"
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

	var svc *replay.Service
	b := setup(t, func(o *setupOpts) {
		st, _ := dlqtest.Store(t)
		o.store = st
		svc, err = replay.New(replay.Config{Store: st, Conn: conn, PollInterval: 50 * time.Millisecond})
		require.NoError(t, err)
		o.replayer = svc
	})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); _ = svc.Run(ctx) }()
	t.Cleanup(func() { cancel(); <-done })

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
	// Audit rows from the replay service for the replay.
	require.Positive(t, b.count(t, `SELECT count(*) FROM audit_log WHERE action = 'replay'`))
}
