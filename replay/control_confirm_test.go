package replay_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	oplayer "github.com/dlq/dlq/ops"
)

// A replay by filter selecting more than the confirmation threshold needs
// "confirm": true, as over HTTP; the refusal names the count and the
// threshold and starts nothing. Ids, dry runs and limits within the
// threshold need no confirmation.
func TestControlReplayNeedsConfirmAboveThreshold(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer = true })
	q := b.targetQueue(t)
	ids := b.seed(t, q, 8)
	queue := b.controlWith(t, func(_ *control.Config, o *oplayer.Config) { o.ConfirmAbove = 5 })
	ops := b.client(t, queue, operatorToken)

	a := call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"c-1","filter":{"source_queue":%q},"delay_seconds":3600}`, q))
	requireCode(t, a, control.CodeConfirmRequired)
	require.Contains(t, a.Error.Message, "more than 5 messages")
	require.Contains(t, a.Error.Message, "at least 8")
	require.Contains(t, a.Error.Message, "confirm: true")
	require.Zero(t, b.tableCount(t, "replay_tasks"), "nothing started")

	dry := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"c-2","filter":{"source_queue":%q},"dry_run":true}`, q)))
	require.Equal(t, int64(8), dry.Requested)
	limited := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"c-3","filter":{"source_queue":%q},"limit":5,"delay_seconds":3600}`, q)))
	require.Equal(t, int64(5), limited.Requested)
	byIDs := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"c-4","ids":[%d,%d,%d,%d,%d,%d],"delay_seconds":3600}`,
		ids[0], ids[1], ids[2], ids[3], ids[4], ids[5])))
	require.Equal(t, int64(6), byIDs.Requested)
	confirmed := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"c-5","filter":{"source_queue":%q},"delay_seconds":3600,"confirm":true}`, q)))
	require.Equal(t, int64(8), confirmed.Requested)
	require.Equal(t, 3, b.tableCount(t, "replay_tasks"))

	// The refused command was not remembered: confirmed, the same id runs.
	again := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"c-1","filter":{"source_queue":%q},"delay_seconds":3600,"confirm":true}`, q)))
	require.Equal(t, int64(8), again.Requested)
}

// The audit rows of control commands sent with a token scoped to queues
// carry that scope, along with the token's name, role and the command_id.
func TestControlAuditCarriesTheTokenScope(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.noConsumer = true })
	mine := b.targetQueue(t)
	ids := b.seed(t, mine, 3)
	queue := b.control(t, mine)
	scoped := b.client(t, queue, "scoped-secret")

	task := taskOf(t, call(t, scoped, `{"command":"replay","command_id":"s-replay","filter":{},"delay_seconds":3600}`))
	require.Equal(t, int64(3), task.Requested)
	requireOK(t, call(t, scoped, fmt.Sprintf(`{"command":"acknowledge","command_id":"s-ack","ids":[%d]}`, ids[0])))
	requireOK(t, call(t, scoped, fmt.Sprintf(`{"command":"cancel_replay","command_id":"s-cancel","id":%d}`, task.ID)))

	type row struct {
		actor, role, via, requestID string
		scope                       []string
	}
	read := func(action string) row {
		t.Helper()
		var r row
		require.NoError(t, b.db.QueryRow(context.Background(), `
SELECT actor, role, via, request_id, scope FROM audit_log WHERE action = $1`, action).Scan(&r.actor, &r.role, &r.via, &r.requestID, &r.scope))
		return r
	}
	for action, id := range map[string]string{"replay": "s-replay", "acknowledge": "s-ack", "replay_cancel": "s-cancel"} {
		require.Equal(t, row{actor: "scoped", role: "operator", via: "control", requestID: id, scope: []string{mine}}, read(action), action)
	}
}
