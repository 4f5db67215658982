package api_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// editBundle is an API over a running replay service, whose messages
// were first published to exchange, routing key <queue>.key, bound to a
// queue the test reads: a copy published to the message's origin lands
// there.
type editBundle struct {
	*bundle
	app      *amqp.Connection
	exchange string
	queue    string // the source queue, and the queue the copies land on
}

func setupEdit(t *testing.T) *editBundle {
	t.Helper()
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	e := &editBundle{app: app, exchange: dlqtest.Name(t, "app"), queue: dlqtest.Name(t, "orders")}
	require.NoError(t, ch.ExchangeDeclare(e.exchange, "direct", false, true, false, false, nil))
	_, err := ch.QueueDeclare(e.queue, true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.QueueBind(e.queue, e.queue+".key", e.exchange, false, nil))
	dlqtest.DeleteQueues(t, app, e.queue)
	dlqtest.DeleteExchanges(t, app, e.exchange)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "api-edit-test"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	e.bundle = setup(t, replayer(t, conn), func(o *setupOpts) {
		o.ops = func(c *ops.Config) {
			c.EditLockedHeaders = []string{"tenant-id"}
			c.EditSensitiveHeaders = []string{"authorization"}
		}
	})
	return e
}

// seedEdit stores n JSON messages of the bundle's source queue with typed
// headers, including a sensitive one.
func (e *editBundle) seedEdit(t *testing.T, n int) []int64 {
	t.Helper()
	ms := make([]msg, n)
	for i := range ms {
		ms[i] = msg{queue: e.queue, exchange: e.exchange, messageID: fmt.Sprintf("m-%d", i), body: `{"order":1,"sku":"A"}`,
			headers: amqp.Table{"tenant": "t1", "count": int32(5), "authorization": "Bearer secret"}}
	}
	return e.seed(t, ms...)
}

func (e *editBundle) edit(t *testing.T, id int64, token string, body map[string]any) response {
	t.Helper()
	return e.do(t, "POST", fmt.Sprintf("/api/v1/messages/%d/edit-replay", id), token, body)
}

// An edit is refused, naming the problem, when it would change a locked
// header (dlq's, the broker's, a configured one), a sensitive header
// without force, or give a JSON message a body that is not JSON; nothing
// is recorded then. A dry run shows exactly what would be sent.
func TestEditReplayRefusals(t *testing.T) {
	t.Parallel()
	e := setupEdit(t)
	id := e.seedEdit(t, 1)[0]
	for _, c := range []struct {
		body     map[string]any
		code     int
		contains string
	}{
		{map[string]any{"set_headers": map[string]any{"x-dlq-id": "7"}}, http.StatusBadRequest, `"x-dlq-id" cannot be edited`},
		{map[string]any{"remove_headers": []string{"x-death"}}, http.StatusBadRequest, `"x-death" cannot be edited`},
		{map[string]any{"set_headers": map[string]any{"x-first-death-queue": "q"}}, http.StatusBadRequest, "set by RabbitMQ"},
		{map[string]any{"set_headers": map[string]any{"Tenant-Id": "t9"}}, http.StatusBadRequest, "locked by configuration"},
		{map[string]any{"remove_headers": []string{"authorization"}}, http.StatusBadRequest, "force: true"},
		{map[string]any{"body": "{\"order\": 1,\n  \"sku\": }"}, http.StatusBadRequest, "line 2, column"},
		{map[string]any{"body_base64": "not base64!"}, http.StatusBadRequest, "body_base64"},
		{map[string]any{}, http.StatusBadRequest, "nothing to change"},
		{map[string]any{"body": "{}", "body_base64": "e30="}, http.StatusBadRequest, "not both"},
	} {
		r := e.edit(t, id, tokOp, c.body)
		require.Equal(t, c.code, r.status, "%v: %s", c.body, r.body)
		require.Contains(t, r.errMessage(t), c.contains, "%v", c.body)
	}
	r := e.edit(t, id, tokViewer, map[string]any{"body": "{}"})
	require.Equal(t, http.StatusForbidden, r.status, "%s", r.body)

	// A dry run: exactly the copy, nothing recorded.
	r = e.edit(t, id, tokOp, map[string]any{"body": `{"order":1,"sku":"B"}`, "remove_headers": []string{"authorization"},
		"force": true, "dry_run": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var res ops.EditResult
	r.json(t, &res)
	require.True(t, res.DryRun)
	require.Nil(t, res.Task)
	require.Equal(t, `{"order":1,"sku":"B"}`, string(res.Copy.Body))
	h, err := broker.DecodeHeadersJSON(res.Copy.Headers)
	require.NoError(t, err)
	require.Equal(t, id, h[replay.HeaderEditedFrom])
	require.Equal(t, res.Copy.ReplayID, h[broker.HeaderReplayID])
	require.NotContains(t, h, "authorization")
	require.NotContains(t, h, broker.HeaderID)
	require.Equal(t, int32(5), h["count"], "the AMQP type of an untouched header is kept")
	require.Equal(t, e.exchange, res.Copy.Exchange)
	require.Zero(t, e.count(t, `SELECT count(*) FROM replay_tasks`))
	require.Zero(t, e.count(t, `SELECT count(*) FROM message_edits`))
	require.Zero(t, e.count(t, `SELECT count(*) FROM audit_log`))
}

// The corrected copy arrives at the message's origin with the new body and
// header changes and everything else as it was; the original is kept,
// leaves the pending set and links to the copy; the audit row holds the
// diff (header changes in full, the body's sizes and hash, never the
// body); a second edit of it is a 409.
func TestEditReplayPublishesTheCopy(t *testing.T) {
	t.Parallel()
	e := setupEdit(t)
	id := e.seedEdit(t, 1)[0]
	newBody := `{"order":1,"sku":"B-corrected"}`
	r := e.edit(t, id, tokOp, map[string]any{
		"body_base64":    base64.StdEncoding.EncodeToString([]byte(newBody)),
		"set_headers":    map[string]any{"x-fixed-by": "ops", "retries": map[string]any{"type": "int16", "value": 2}},
		"remove_headers": []string{"tenant"},
	})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var res ops.EditResult
	r.json(t, &res)
	require.NotNil(t, res.Task)
	waitTask(t, e.bundle, res.Task.ID, tokOp)

	got := e.consumeOne(t)
	require.Equal(t, newBody, string(got.Body))
	require.Equal(t, "application/json", got.ContentType)
	require.Equal(t, "m-0", got.MessageId)
	require.Equal(t, uint8(2), got.DeliveryMode)
	require.Equal(t, "ops", got.Headers["x-fixed-by"])
	require.Equal(t, int16(2), got.Headers["retries"])
	require.Equal(t, int32(5), got.Headers["count"])
	require.Equal(t, "Bearer secret", got.Headers["authorization"], "an untouched sensitive header is sent as it was")
	require.NotContains(t, got.Headers, "tenant")
	require.NotContains(t, got.Headers, "x-death")
	require.NotContains(t, got.Headers, broker.HeaderID, "the copy is a new message, not a replay of the original")
	require.Equal(t, id, got.Headers[replay.HeaderEditedFrom])
	require.Equal(t, res.Copy.ReplayID, got.Headers[broker.HeaderReplayID])

	// The original: kept, no longer pending, linked to its copy.
	r = e.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", id), tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var m store.Message
	r.json(t, &m)
	require.Equal(t, store.StatusReplayed, m.Status)
	require.NotNil(t, m.Edited)
	require.Equal(t, store.EditSent, m.Edited.State)
	require.Equal(t, res.Copy.ReplayID, m.Edited.CopyReplayID)
	require.Equal(t, "ops", m.Edited.EditedBy)

	// The diff, without the body.
	var detail string
	require.NoError(t, e.db.QueryRow(t.Context(), `SELECT detail::text FROM audit_log WHERE action = 'edit_replay'`).Scan(&detail))
	require.Contains(t, detail, `"x-fixed-by": "ops"`)
	require.Contains(t, detail, `"headers_removed": ["tenant"]`)
	require.Contains(t, detail, `"sha256_after"`)
	require.Contains(t, detail, fmt.Sprintf(`"size_after": %d`, len(newBody)))
	require.NotContains(t, detail, "corrected", "the audit row never holds the body")

	r = e.edit(t, id, tokOp, map[string]any{"body": "{}"})
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Contains(t, r.errMessage(t), "edit the copy")
	require.EqualValues(t, 1, e.count(t, `SELECT count(*) FROM replay_tasks`))
}

// Two edits of one message at once: one is accepted, the other is a 409,
// and exactly one copy is sent.
func TestEditReplayConcurrentEdits(t *testing.T) {
	t.Parallel()
	e := setupEdit(t)
	id := e.seedEdit(t, 1)[0]
	var wg sync.WaitGroup
	statuses := make([]int, 2)
	for i := range statuses {
		wg.Add(1)
		go func() {
			defer wg.Done()
			statuses[i] = e.edit(t, id, tokOp, map[string]any{"body": fmt.Sprintf(`{"edit":%d}`, i)}).status
		}()
	}
	wg.Wait()
	require.ElementsMatch(t, []int{http.StatusAccepted, http.StatusConflict}, statuses)
	got := e.consumeOne(t)
	require.True(t, strings.HasPrefix(string(got.Body), `{"edit":`), "%s", got.Body)
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		return e.count(t, `SELECT count(*) FROM dead_messages WHERE status = 'replayed'`) == 1
	}, "the original replayed")
	require.Equal(t, 0, dlqtest.QueueDepth(t, e.app, e.queue), "one copy only")
}

// consumeOne waits for one message on the bundle's queue and acks it.
func (e *editBundle) consumeOne(t *testing.T) amqp.Delivery {
	t.Helper()
	ch := dlqtest.Channel(t, e.app)
	var got amqp.Delivery
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		d, ok, err := ch.Get(e.queue, true)
		require.NoError(t, err)
		got = d
		return ok
	}, "a copy on %s", e.queue)
	return got
}
