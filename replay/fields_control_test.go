package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/store"
)

// Field filters in the control queue's filters: a replay publishes only
// the messages whose JSON bodies match, acknowledge changes only those,
// and an unbounded or invalid field filter is refused naming the problem.
func TestControlFieldFilters(t *testing.T) {
	t.Parallel()
	b := setup(t)
	q := b.targetQueue(t)
	now := time.Now().UTC()
	bodies := []string{
		`{"order":{"id":42,"lines":[{"sku":"A1"}]},"region":"eu"}`,
		`{"order":{"id":43,"lines":[{"sku":"B2"},{"sku":"A1"}]},"region":"us"}`,
		`{"order":{"id":"42"},"region":"eu"}`,
		`order.id=42`,
		"\x00\x01binary",
	}
	var msgs []store.NewMessage
	for i, body := range bodies {
		msgs = append(msgs, store.NewMessage{
			SourceQueue: q, SourceRoutingKey: q, DeadLetterQueue: b.queue, Reason: "rejected", DeathCount: 1,
			Properties: []byte(`{"delivery_mode":2,"content_type":"application/json"}`), Headers: []byte(`{}`),
			Body: []byte(body), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1),
		})
	}
	_, err := b.st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "seed", Messages: msgs})
	require.NoError(t, err)
	ids := b.ids(t, "source_queue = $1", q)
	ops := b.client(t, b.control(t), operatorToken)

	dry := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"f-dry","filter":{"source_queue":%q,"fields":["order.lines.sku=A1"]},"dry_run":true}`, q)))
	require.EqualValues(t, 2, dry.Requested)

	task := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"f-1","filter":{"source_queue":%q,"fields":["order.id=42","region=eu"]}}`, q)))
	require.EqualValues(t, 1, task.Requested, "42 the number, not \"42\" the string")
	b.waitTask(t, task.ID, 60*time.Second, "completed")
	got := b.consume(t, q, 1, 30*time.Second)
	require.Equal(t, ids[0], got[0].Headers[broker.HeaderID])
	require.JSONEq(t, bodies[0], string(got[0].Body))

	a := call(t, ops, fmt.Sprintf(`{"command":"acknowledge","command_id":"f-2","filter":{"source_queue":%q,"fields":["order.id?"]}}`, q))
	requireOK(t, a)
	var res store.ActionResult
	require.NoError(t, json.Unmarshal(a.Result, &res))
	require.EqualValues(t, 2, res.Changed, "the two pending JSON bodies with an order id; not the text or binary ones")
	require.Equal(t, 2, b.count(t, "source_queue = $1 AND status = 'pending'", q))

	for body, says := range map[string]string{
		`{"command":"replay","command_id":"f-3","filter":{"fields":["order.id=42"]}}`:                                "add source_queue",
		`{"command":"acknowledge","command_id":"f-4","filter":{"status":"all","fields":["order.id=42"]}}`:            "add source_queue",
		fmt.Sprintf(`{"command":"replay","command_id":"f-5","filter":{"source_queue":%q,"fields":["order.=1"]}}`, q): "empty path segment",
		fmt.Sprintf(`{"command":"replay","command_id":"f-6","filter":{"source_queue":%q,"fields":["order"]}}`, q):    "no operator",
	} {
		a := call(t, ops, body)
		require.False(t, a.OK, body)
		require.Equal(t, control.CodeInvalidRequest, a.Error.Code, "%s: %+v", body, a.Error)
		require.Contains(t, a.Error.Message, says, body)
	}
}
