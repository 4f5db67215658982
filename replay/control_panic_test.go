package replay_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	oplayer "github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// panicky is the real operations layer with a bug that can be switched
// on: acknowledge panics.
type panicky struct {
	control.Operations
	armed atomic.Bool
}

func (p *panicky) Acknowledge(ctx context.Context, c oplayer.Caller, r oplayer.ActionRequest) (store.ActionResult, error) {
	if p.armed.Load() {
		panic("acknowledge: a bug")
	}
	return p.Operations.Acknowledge(ctx, c, r)
}

// A command whose handler panics is answered with an internal error that
// names its command_id, is acknowledged (never redelivered), and the one
// consumer goes on serving. The command was not remembered: once the bug
// is gone, a retry with the same command_id runs it.
func TestControlPanicAnswersAndKeepsServing(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, ids := b.deadLetter(t, 1)
	actions := &panicky{}
	actions.armed.Store(true)
	queue := b.controlWith(t, func(c *control.Config, o *oplayer.Config) {
		actions.Operations = newOps(t, *o)
		c.Ops, c.Consumers = actions, 1
	})
	ops := b.client(t, queue, operatorToken)

	body := fmt.Sprintf(`{"command":"acknowledge","command_id":"p-1","ids":[%d]}`, ids[0])
	a := call(t, ops, body)
	requireCode(t, a, control.CodeInternal)
	require.Equal(t, "p-1", a.CommandID)

	requireOK(t, call(t, ops, `{"command":"list_replays","command_id":"after-panic"}`))
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, queue) == 0 }, "control queue not drained")
	internal := mustCollector(t, b.reg, "dlq_control_commands_total", "result", control.CodeInternal)
	require.Equal(t, 1.0, testutil.ToFloat64(internal), "handled once: acknowledged, not redelivered")
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'pending'", ids[0]), "nothing changed")

	actions.armed.Store(false)
	requireOK(t, call(t, ops, body))
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'acknowledged'", ids[0]))
}
