package replay_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus/testutil"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	oplayer "github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

const (
	adminToken    = "admin-secret"
	operatorToken = "operator-secret"
	viewerToken   = "viewer-secret"
)

// control runs a Control on a fresh control queue of the bundle and
// returns the queue's name. scoped tokens get the queues given.
func (b *bundle) control(t *testing.T, scopedQueues ...string) string {
	t.Helper()
	return b.controlWith(t, nil, scopedQueues...)
}

// controlWith is control with tweak applied to the Control's and its
// operations layer's configurations. The layer is built from the latter
// unless the tweak sets the Control's Ops itself.
func (b *bundle) controlWith(t *testing.T, tweak func(*control.Config, *oplayer.Config), scopedQueues ...string) string {
	t.Helper()
	queue, stop := b.startControl(t, tweak, scopedQueues...)
	t.Cleanup(stop)
	return queue
}

// startControl is controlWith, returning the func that stops the Control
// (and waits for it) for a test that looks at the queue after it.
func (b *bundle) startControl(t *testing.T, tweak func(*control.Config, *oplayer.Config), scopedQueues ...string) (string, func()) {
	t.Helper()
	tokens := []auth.Token{
		{Name: "ops", Token: operatorToken, Role: auth.RoleOperator},
		{Name: "watcher", Token: viewerToken, Role: auth.RoleViewer},
	}
	if len(scopedQueues) > 0 {
		tokens = append(tokens, auth.Token{Name: "scoped", Token: "scoped-secret", Role: auth.RoleOperator, Queues: scopedQueues})
	}
	a, err := auth.New(auth.Config{AdminToken: adminToken, Tokens: tokens, RatePerSecond: -1})
	require.NoError(t, err)
	queue := dlqtest.Name(t, "ctl")
	dlqtest.DeleteQueues(t, b.app, queue)
	cfg := control.Config{
		Conn: b.conn, Queue: queue, Commands: b.st, Auth: a,
		Consumers: 2, MaxBytes: 1 << 20, Registerer: b.reg,
	}
	oc := oplayer.Config{Store: b.st, Replays: b.svc, ConfirmAbove: 1000}
	if tweak != nil {
		tweak(&cfg, &oc)
	}
	if cfg.Ops == nil {
		cfg.Ops = newOps(t, oc)
	}
	c, err := control.New(cfg)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		require.NoError(t, c.Run(ctx))
	}()
	stop := sync.OnceFunc(func() { cancel(); <-done })
	t.Cleanup(stop)
	// The subscribers declare the queue and consume it; wait for all of
	// them before sending. Declared is not enough: RabbitMQ 3.10 can
	// answer a quorum queue's declaration before the queue runs, and a
	// consumer's subscription then fails and takes its connection down
	// (541 INTERNAL_ERROR, once in make test); a command sent meanwhile
	// got no answer.
	want := max(cfg.Consumers, 1)
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		ch, err := b.app.Channel()
		if err != nil {
			return false
		}
		defer ch.Close()
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err == nil && q.Consumers >= want
	}, "control queue %s not declared and consumed by %d", queue, want)
	return queue, stop
}

// newOps is the operations layer of cfg.
func newOps(t *testing.T, cfg oplayer.Config) *oplayer.Service {
	t.Helper()
	o, err := oplayer.New(cfg)
	require.NoError(t, err)
	return o
}

func (b *bundle) client(t *testing.T, queue, token string) *control.Client {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	c, err := control.Dial(ctx, dlqtest.AMQPURL(), queue, token)
	require.NoError(t, err)
	t.Cleanup(func() { _ = c.Close() })
	return c
}

func call(t *testing.T, c *control.Client, body string) control.Answer {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := c.CallRaw(ctx, []byte(body))
	require.NoError(t, err)
	return a
}

func requireOK(t *testing.T, a control.Answer) {
	t.Helper()
	require.True(t, a.OK, "answer: %+v", a.Error)
	require.Nil(t, a.Error)
}

func requireCode(t *testing.T, a control.Answer, code string) {
	t.Helper()
	require.False(t, a.OK)
	require.NotNil(t, a.Error, "answer has no error")
	require.Equal(t, code, a.Error.Code, "message: %s", a.Error.Message)
	require.NotEmpty(t, a.Error.Message)
	require.Nil(t, a.Result)
}

func taskOf(t *testing.T, a control.Answer) replay.Task {
	t.Helper()
	requireOK(t, a)
	var task replay.Task
	require.NoError(t, json.Unmarshal(a.Result, &task))
	return task
}

func (b *bundle) tableCount(t *testing.T, table string) int {
	t.Helper()
	var n int
	require.NoError(t, b.db.QueryRow(context.Background(), "SELECT count(*) FROM "+table).Scan(&n))
	return n
}

// Every command works through the queue; a repeated command_id returns the
// first answer and does nothing again.
func TestControlCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	src, ids := b.deadLetter(t, 6)
	queue := b.control(t)
	ops := b.client(t, queue, operatorToken)
	admin := b.client(t, queue, adminToken)
	viewer := b.client(t, queue, viewerToken)

	t.Run("replay", func(t *testing.T) {
		body := fmt.Sprintf(`{"command":"replay","command_id":"r-1","ids":[%d,%d]}`, ids[0], ids[1])
		first := call(t, ops, body)
		task := taskOf(t, first)
		require.Equal(t, int64(2), task.Requested)
		require.Equal(t, "r-1", first.CommandID)
		b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
		b.consume(t, src, 2, 10*time.Second)

		again := call(t, ops, body)
		require.Equal(t, first, again, "a repeated command_id returns the first answer")
		require.Equal(t, 1.0, testutil.ToFloat64(mustCollector(t, b.reg, "dlq_control_commands_total", "result", "duplicate")))
		require.Equal(t, 1, b.tableCount(t, "replay_tasks"), "and does nothing again")
		require.Equal(t, 2, b.count(t, "status = 'replayed'"))
	})

	t.Run("replay dry run", func(t *testing.T) {
		a := call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"r-dry","filter":{"source_queue":%q},"dry_run":true}`, src))
		task := taskOf(t, a)
		require.Equal(t, replay.StatusDryRun, task.Status)
		require.Equal(t, int64(4), task.Requested)
		require.Len(t, task.Sample, 4)
		require.Equal(t, 1, b.tableCount(t, "replay_tasks"))
	})

	t.Run("replay_status and list_replays", func(t *testing.T) {
		a := call(t, viewer, `{"command":"list_replays","command_id":"l-1"}`)
		requireOK(t, a)
		var list struct{ Replays []replay.Task }
		require.NoError(t, json.Unmarshal(a.Result, &list))
		require.Len(t, list.Replays, 1)
		st := taskOf(t, call(t, viewer, fmt.Sprintf(`{"command":"replay_status","command_id":"s-1","id":%d}`, list.Replays[0].ID)))
		require.Equal(t, replay.StatusCompleted, st.Status)
		requireCode(t, call(t, viewer, `{"command":"replay_status","command_id":"s-2","id":999999}`), control.CodeNotFound)
	})

	t.Run("cancel_replay", func(t *testing.T) {
		a := call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"r-slow","ids":[%d],"delay_seconds":3600}`, ids[2]))
		task := taskOf(t, a)
		require.Equal(t, replay.StatusScheduled, task.Status)
		c := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"cancel_replay","command_id":"c-1","id":%d}`, task.ID)))
		require.Equal(t, replay.StatusCancelled, c.Status)
		require.Equal(t, 1, b.count(t, "id = $1 AND status = 'pending'", ids[2]), "nothing was replayed")
		requireCode(t, call(t, viewer, fmt.Sprintf(`{"command":"cancel_replay","command_id":"c-2","id":%d}`, task.ID)), control.CodeForbidden)
	})

	t.Run("acknowledge", func(t *testing.T) {
		body := fmt.Sprintf(`{"command":"acknowledge","command_id":"a-1","ids":[%d]}`, ids[3])
		first := call(t, ops, body)
		requireOK(t, first)
		var r store.ActionResult
		require.NoError(t, json.Unmarshal(first.Result, &r))
		require.Equal(t, int64(1), r.Changed)
		require.Equal(t, first, call(t, ops, body))
		require.Equal(t, 1, b.count(t, "id = $1 AND status = 'acknowledged'", ids[3]))
	})

	t.Run("delete needs admin", func(t *testing.T) {
		body := fmt.Sprintf(`{"command":"delete","command_id":"d-1","ids":[%d]}`, ids[4])
		requireCode(t, call(t, ops, body), control.CodeForbidden)
		a := call(t, admin, body)
		requireOK(t, a)
		require.Zero(t, b.count(t, "id = $1", ids[4]))
		// The forbidden attempt was not remembered: the admin's ran.
		require.Equal(t, a, call(t, admin, body))
	})

	t.Run("command_id reused for another command", func(t *testing.T) {
		requireCode(t, call(t, ops, fmt.Sprintf(`{"command":"acknowledge","command_id":"r-1","ids":[%d]}`, ids[5])), control.CodeConflict)
		require.Equal(t, 1, b.count(t, "id = $1 AND status = 'pending'", ids[5]))
	})

	t.Run("tokens", func(t *testing.T) {
		body := fmt.Sprintf(`{"command":"acknowledge","command_id":"tok-1","ids":[%d]}`, ids[5])
		requireCode(t, call(t, b.client(t, queue, "wrong"), body), control.CodeInvalidToken)
		requireCode(t, call(t, b.client(t, queue, ""), body), control.CodeMissingToken)
		require.Equal(t, 1, b.count(t, "id = $1 AND status = 'pending'", ids[5]))
		// A rejected caller did not spend the command_id.
		requireOK(t, call(t, ops, body))
	})
	b.requireSummaryExact(t)
}

// A scoped token only touches its own queues.
func TestControlScopedToken(t *testing.T) {
	t.Parallel()
	b := setup(t)
	mine, myIDs := b.deadLetter(t, 1)
	_, otherIDs := b.deadLetter(t, 1)
	queue := b.control(t, mine)
	scoped := b.client(t, queue, "scoped-secret")
	requireCode(t, call(t, scoped, fmt.Sprintf(`{"command":"replay","command_id":"x-1","ids":[%d]}`, otherIDs[0])), control.CodeNotFound)
	task := taskOf(t, call(t, scoped, `{"command":"replay","command_id":"x-3","filter":{}}`))
	require.Equal(t, int64(1), task.Requested, "a filter is limited to the token's queues")
	b.waitTask(t, task.ID, 20*time.Second, replay.StatusCompleted)
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'replayed'", myIDs[0]))
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'pending'", otherIDs[0]))

	var list struct{ Replays []replay.Task }
	a := call(t, scoped, `{"command":"list_replays","command_id":"x-4"}`)
	requireOK(t, a)
	require.NoError(t, json.Unmarshal(a.Result, &list))
	require.Len(t, list.Replays, 1)
	// A task of an unscoped caller is invisible to the scoped one.
	ops := b.client(t, queue, operatorToken)
	other := taskOf(t, call(t, ops, fmt.Sprintf(`{"command":"replay","command_id":"x-5","ids":[%d],"delay_seconds":3600}`, otherIDs[0])))
	requireCode(t, call(t, scoped, fmt.Sprintf(`{"command":"cancel_replay","command_id":"x-6","id":%d}`, other.ID)), control.CodeNotFound)
}

// Malformed and hostile commands are answered with an error, acknowledged,
// and change nothing; the consumer goes on answering.
func TestControlMalformedCommands(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, ids := b.deadLetter(t, 2)
	queue := b.control(t)
	ops := b.client(t, queue, operatorToken)

	var million strings.Builder
	million.WriteString(`{"command":"replay","command_id":"big","ids":[`)
	for i := 0; i < 1_000_000; i++ {
		if i > 0 {
			million.WriteByte(',')
		}
		million.WriteString("1")
	}
	million.WriteString("]}")
	var many strings.Builder
	many.WriteString(`{"command":"replay","command_id":"many","ids":[`)
	for i := 1; i <= store.MaxFilterIDs+1; i++ {
		if i > 1 {
			many.WriteByte(',')
		}
		fmt.Fprint(&many, i)
	}
	many.WriteString("]}")

	cases := []struct{ name, body, code string }{
		{"empty", ``, control.CodeInvalidJSON},
		{"not JSON", `replay everything`, control.CodeInvalidJSON},
		{"truncated", `{"command":"replay","command_id":"t","ids":[1,`, control.CodeInvalidJSON},
		{"array", `[{"command":"replay"}]`, control.CodeInvalidJSON},
		{"null", `null`, control.CodeInvalidRequest},
		{"trailing data", `{"command":"list_replays","command_id":"td"} {"command":"delete"}`, control.CodeInvalidJSON},
		{"unknown field", `{"command":"replay","command_id":"uf","ids":[1],"rate":5}`, control.CodeInvalidJSON},
		{"unknown command", `{"command":"purge","command_id":"uc"}`, control.CodeUnknownCommand},
		{"missing command_id", `{"command":"list_replays"}`, control.CodeInvalidRequest},
		{"one million ids", million.String(), control.CodeTooLarge},
		{"too many ids", many.String(), control.CodeInvalidRequest},
		{"negative id", `{"command":"replay","command_id":"n1","ids":[-5]}`, control.CodeInvalidRequest},
		{"negative limit", `{"command":"replay","command_id":"n2","filter":{},"limit":-1}`, control.CodeInvalidRequest},
		{"negative rate", `{"command":"replay","command_id":"n3","ids":[1],"rate_per_second":-10}`, control.CodeInvalidRequest},
		{"negative delay", `{"command":"replay","command_id":"n4","ids":[1],"delay_seconds":-1}`, control.CodeInvalidRequest},
		{"negative task id", `{"command":"cancel_replay","command_id":"n5","id":-3}`, control.CodeInvalidRequest},
		{"huge number", `{"command":"replay","command_id":"n6","ids":[1e999]}`, control.CodeInvalidJSON},
		{"fractional id", `{"command":"replay","command_id":"n7","ids":[1.5]}`, control.CodeInvalidJSON},
		{"sql in command", `{"command":"replay'; DROP TABLE dead_messages; --","command_id":"s1"}`, control.CodeUnknownCommand},
		{"sql in status", `{"command":"replay","command_id":"s2","filter":{"status":"pending' OR '1'='1"}}`, control.CodeInvalidRequest},
		{"sql in ids", `{"command":"acknowledge","command_id":"s3","ids":["1 OR 1=1"]}`, control.CodeInvalidJSON},
		{"sql in limit", `{"command":"replay","command_id":"s4","filter":{},"limit":"1; DROP TABLE replay_tasks"}`, control.CodeInvalidJSON},
		{"sql in queue", `{"command":"replay","command_id":"s5","filter":{"source_queue":"x'; DROP TABLE dead_messages; --"}}`, control.CodeNotFound},
		{"control characters in command_id", "{\"command\":\"list_replays\",\"command_id\":\"a\\u0000b\"}", control.CodeInvalidRequest},
		{"field of another command", `{"command":"acknowledge","command_id":"o1","ids":[1],"rate_per_second":5}`, control.CodeInvalidRequest},
		{"both ids and filter", `{"command":"replay","command_id":"o2","ids":[1],"filter":{}}`, control.CodeInvalidRequest},
		{"nothing selected", `{"command":"acknowledge","command_id":"o3"}`, control.CodeInvalidRequest},
		{"bad target", `{"command":"replay","command_id":"o4","ids":[1],"target":{"exchange":"","routing_key":""}}`, control.CodeInvalidRequest},
		{"bad canary", `{"command":"replay","command_id":"o5","ids":[1],"canary":{"count":0,"wait_seconds":5}}`, control.CodeInvalidRequest},
		{"bad on_unknown", `{"command":"replay","command_id":"o6","ids":[1],"on_unknown":"drop"}`, control.CodeInvalidRequest},
		{"on_unknown of another command", `{"command":"delete","command_id":"o7","ids":[1],"on_unknown":"hold"}`, control.CodeInvalidRequest},
	}
	for _, c := range cases {
		a := call(t, ops, c.body)
		require.False(t, a.OK, "%s: %+v", c.name, a)
		require.NotNil(t, a.Error, c.name)
		require.Equal(t, c.code, a.Error.Code, "%s: %s", c.name, a.Error.Message)
		if strings.Contains(c.name, "on_unknown") {
			require.Contains(t, a.Error.Message, "on_unknown", "the error names the field")
		}
	}

	// A command with no reply_to is acknowledged all the same, and one whose
	// headers are not strings (token as bytes, typed values) is understood.
	ch := dlqtest.Channel(t, b.app)
	require.NoError(t, ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{Body: []byte(`{oops`)}))
	raw := b.rawCall(t, queue, amqp.Table{control.TokenHeader: []byte(operatorToken), "x-n": int16(3), "x-t": amqp.Table{"a": []any{1.5}}},
		fmt.Sprintf(`{"command":"acknowledge","command_id":"bytes-token","ids":[%d]}`, ids[0]))
	requireOK(t, raw)

	// Nothing changed, nothing is left in the queue, and the consumer still
	// answers.
	require.Zero(t, b.tableCount(t, "replay_tasks"))
	require.Equal(t, 1, b.count(t, "status = 'pending'"))
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, queue) == 0 }, "control queue not drained")
	requireOK(t, call(t, ops, `{"command":"list_replays","command_id":"after"}`))
}

// rawCall publishes a command with the given headers on a direct-reply
// channel of the test's own and waits for the answer.
func (b *bundle) rawCall(t *testing.T, queue string, headers amqp.Table, body string) control.Answer {
	t.Helper()
	ch := dlqtest.Channel(t, b.app)
	ds, err := ch.Consume("amq.rabbitmq.reply-to", "", true, false, false, false, nil)
	require.NoError(t, err)
	require.NoError(t, ch.PublishWithContext(context.Background(), "", queue, false, false, amqp.Publishing{
		ReplyTo: "amq.rabbitmq.reply-to", CorrelationId: "raw-1", Headers: headers, Body: []byte(body),
	}))
	select {
	case d := <-ds:
		require.Equal(t, "raw-1", d.CorrelationId)
		var a control.Answer
		require.NoError(t, json.Unmarshal(d.Body, &a))
		return a
	case <-time.After(20 * time.Second):
		t.Fatal("no answer")
	}
	return control.Answer{}
}

// TestControlCommandOfADeadHandlerRuns: a command whose handler died
// (its reservation left behind, as by a kill -9 mid-command) runs when
// RabbitMQ redelivers it, once the reservation lapses. It was answered
// "still being handled" and acknowledged: gone from the queue, never run.
func TestControlCommandOfADeadHandlerRuns(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, ids := b.deadLetter(t, 1)
	queue := b.controlWith(t, func(c *control.Config, _ *oplayer.Config) { c.CommandLease = 3 * time.Second })
	ops := b.client(t, queue, operatorToken)
	// The dead handler's reservation: longer than the old 10 s wait.
	res, err := b.st.ReserveCommand(context.Background(), "dead-1", "acknowledge", "ops", 12*time.Second)
	require.NoError(t, err)
	require.True(t, res.Reserved)

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	a, err := ops.CallRaw(ctx, []byte(fmt.Sprintf(`{"command":"acknowledge","command_id":"dead-1","ids":[%d]}`, ids[0])))
	require.NoError(t, err)
	requireOK(t, a)
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'acknowledged'", ids[0]), "the command ran")
}

// TestControlTakeoverGivenUpRunsAtOnce: a repeat waiting for a dead
// handler's command that takes its reservation over just as its channel
// is lost gives the reservation up with the delivery, so that the
// redelivery runs the command at once. It kept the reservation, and the
// redelivery waited a whole CommandLease (30 s) for it to lapse.
func TestControlTakeoverGivenUpRunsAtOnce(t *testing.T) {
	t.Parallel()
	connName := dlqtest.Name(t, "conn")
	b := setup(t, func(o *setupOpts) { o.connName = connName })
	_, ids := b.deadLetter(t, 1)
	cmds := &takeoverHook{CommandStore: b.st, hook: func(ctx context.Context) {
		// The waiter's channel is lost as it takes the reservation over.
		if err := dlqtest.CloseConnection(connName); err != nil {
			t.Error(err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(20 * time.Second):
			t.Error("the waiter went on after its channel was lost")
		}
	}}
	// One consumer, and the default lease (30 s).
	queue := b.controlWith(t, func(c *control.Config, _ *oplayer.Config) { c.Commands, c.Consumers = cmds, 1 })
	ops := b.client(t, queue, operatorToken)
	ctx := context.Background()
	res, err := b.st.ReserveCommand(ctx, "lost-1", "acknowledge", "ops", 3*time.Second)
	require.NoError(t, err)
	require.True(t, res.Reserved)

	// The dead handler's reservation lapses after 3 s; the redelivery
	// needs a reconnect; the given-up reservation would lapse after 30 s.
	cctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	a, err := ops.CallRaw(cctx, []byte(fmt.Sprintf(`{"command":"acknowledge","command_id":"lost-1","ids":[%d]}`, ids[0])))
	require.True(t, cmds.fired.Load(), "the repeat never took the reservation over")
	require.NoError(t, err, "the redelivery waited for the given-up reservation to lapse")
	requireOK(t, a)
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'acknowledged'", ids[0]), "the command ran")
}

// takeoverHook is a CommandStore that calls hook, once, with the caller's
// context, when a ReserveCommand first reserves a command, before it
// returns: the moment a waiter takes a lapsed reservation over.
type takeoverHook struct {
	control.CommandStore
	hook  func(ctx context.Context)
	fired atomic.Bool
}

func (h *takeoverHook) ReserveCommand(ctx context.Context, commandID, command, principal string, lease time.Duration) (store.CommandReservation, error) {
	res, err := h.CommandStore.ReserveCommand(ctx, commandID, command, principal, lease)
	if err == nil && res.Reserved && h.fired.CompareAndSwap(false, true) {
		h.hook(ctx)
	}
	return res, err
}

// heldCommand is an acknowledge command of a message whose row a
// transaction holds, so that the command runs until release.
type heldCommand struct {
	lock    pgx.Tx
	body    []byte
	timeout time.Duration
	// answers receives the answer of each send.
	answers chan control.Answer
}

// holdCommand locks the row of message id and sends an acknowledge of it,
// with commandID, through first; it returns once that delivery reserved
// the command. Each send waits up to timeout for its answer.
func (b *bundle) holdCommand(t *testing.T, id int64, commandID string, first *control.Client, timeout time.Duration) *heldCommand {
	t.Helper()
	ctx := context.Background()
	lock, err := b.db.Begin(ctx)
	require.NoError(t, err)
	t.Cleanup(func() { lock.Rollback(ctx) }) //nolint:errcheck // a no-op after release
	_, err = lock.Exec(ctx, `SELECT 1 FROM dead_messages WHERE id = $1 FOR UPDATE`, id)
	require.NoError(t, err)
	h := &heldCommand{
		lock:    lock,
		body:    []byte(fmt.Sprintf(`{"command":"acknowledge","command_id":%q,"ids":[%d]}`, commandID, id)),
		timeout: timeout,
		answers: make(chan control.Answer, 2),
	}
	h.send(first)
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		var n int
		require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM control_commands WHERE command_id = $1`, commandID).Scan(&n))
		return n == 1
	}, "the first delivery did not reserve the command")
	return h
}

// send sends the command again through c, in the background.
func (h *heldCommand) send(c *control.Client) {
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), h.timeout)
		defer cancel()
		a, err := c.CallRaw(ctx, h.body)
		if err != nil {
			a = control.Answer{Error: &control.CommandError{Code: "client", Message: err.Error()}}
		}
		h.answers <- a
	}()
}

// release lets the row go, so that the command runs.
func (h *heldCommand) release(t *testing.T) {
	t.Helper()
	require.NoError(t, h.lock.Rollback(context.Background()))
}

// TestControlLongCommandRunsOnce: a command that runs longer than its
// reservation's lease keeps it (its handler renews it), so a repeat of
// its command_id meanwhile, on another consumer, waits and returns the
// first answer instead of running the command a second time.
func TestControlLongCommandRunsOnce(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, ids := b.deadLetter(t, 1)
	queue := b.controlWith(t, func(c *control.Config, _ *oplayer.Config) { c.CommandLease = time.Second })
	first, again := b.client(t, queue, operatorToken), b.client(t, queue, operatorToken)

	// The row held, so that the acknowledgement waits for it.
	ctx := context.Background()
	held := b.holdCommand(t, ids[0], "long-1", first, 40*time.Second)
	held.send(again)
	// Past three leases, while both wait: the first for the row, the
	// repeat for the first's answer.
	dlqtest.Eventually(t, 10*time.Second, func() bool {
		var held bool
		require.NoError(t, b.db.QueryRow(ctx, `SELECT created_at < now() - interval '3 seconds' AND reserved_until > now()
FROM control_commands WHERE command_id = 'long-1'`).Scan(&held))
		return held
	}, "the reservation was not renewed past its lease")
	held.release(t)

	a1, a2 := <-held.answers, <-held.answers
	requireOK(t, a1)
	require.Equal(t, a1, a2, "the repeat returns the first answer")
	var audits int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE request_id = 'long-1'`).Scan(&audits))
	require.Equal(t, 1, audits, "the command ran once")
}

// TestControlRepeatOfARunningCommandDoesNotBlock: a repeat of a command
// still running (a client's retry, RabbitMQ's redelivery after a lost
// channel) waits for the first's answer off its consumer, which goes on
// with other commands meanwhile. The consumer waited itself: one long
// command repeated once held every other command of the instance until
// it finished.
func TestControlRepeatOfARunningCommandDoesNotBlock(t *testing.T) {
	t.Parallel()
	b := setup(t)
	_, ids := b.deadLetter(t, 2)
	// Two consumers: one runs the long command, the other takes its repeat.
	queue, stop := b.startControl(t, func(c *control.Config, _ *oplayer.Config) { c.Consumers = 2 })
	first, again, other := b.client(t, queue, operatorToken), b.client(t, queue, operatorToken), b.client(t, queue, operatorToken)

	// The row held, so that the acknowledgement waits for it.
	ctx := context.Background()
	held := b.holdCommand(t, ids[0], "slow-1", first, 60*time.Second)
	held.send(again)
	dlqtest.Eventually(t, 10*time.Second, func() bool { return dlqtest.QueueDepth(t, b.app, queue) == 0 },
		"the repeat was not taken by a consumer")

	// Another command, while the first waits for the row and its repeat
	// for the first's answer: answered at once (its deadline is the
	// poll's).
	octx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	a, err := other.CallRaw(octx, []byte(fmt.Sprintf(`{"command":"acknowledge","command_id":"other-1","ids":[%d]}`, ids[1])))
	require.NoError(t, err, "another command waited behind the repeat of a running one")
	requireOK(t, a)
	require.Equal(t, 1, b.count(t, "id = $1 AND status = 'acknowledged'", ids[1]))
	select {
	case a := <-held.answers:
		t.Fatalf("a copy of the held command was answered before it ran: %+v", a)
	default:
	}

	held.release(t)
	a1, a2 := <-held.answers, <-held.answers
	requireOK(t, a1)
	require.Equal(t, a1, a2, "the repeat returns the first answer")
	var audits int
	require.NoError(t, b.db.QueryRow(ctx, `SELECT count(*) FROM audit_log WHERE request_id = 'slow-1'`).Scan(&audits))
	require.Equal(t, 1, audits, "the command ran once")
	// Every delivery was acknowledged: none goes back to the queue when
	// the Control's channels and connection close.
	stop()
	b.conn.Close()
	require.Zero(t, dlqtest.QueueDepth(t, b.app, queue), "a delivery was left unsettled")
}
