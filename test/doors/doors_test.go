package doors_test

import (
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The tokens of the table: one per role, and two operators scoped to the
// queue orders (so that a task one of them starts is "someone else's" for
// the other).
var tokens = []auth.Token{
	{Name: "op", Token: "op-token-0123456789", Role: auth.RoleOperator},
	{Name: "admin-2", Token: "admin-2-token-0123456789", Role: auth.RoleAdmin},
	{Name: "viewer", Token: "viewer-token-0123456789", Role: auth.RoleViewer},
	{Name: "orders-ops", Token: "orders-ops-token-0123456789", Role: auth.RoleOperator, Queues: []string{"orders"}},
	{Name: "orders-ops-2", Token: "orders-ops-2-token-0123456789", Role: auth.RoleOperator, Queues: []string{"orders"}},
}

const adminToken = "admin-token-0123456789"

func tokenOf(name string) string {
	if name == "admin" {
		return adminToken
	}
	for _, t := range tokens {
		if t.Name == name {
			return t.Token
		}
	}
	panic("no token " + name)
}

// confirmAbove is small, so that the table reaches the threshold with a
// handful of messages.
const confirmAbove = 5

// fixture is one store with the same content as every other fixture: 8
// pending messages in orders (ids 1-8 of the fixture, in order) and 8 in
// billing (9-16), and four replay tasks, each scheduled an hour ahead so
// none runs:
//
//	task 1: admin, filter {source_queue: billing}
//	task 2: admin, filter {source_queue: orders}  (visible to a token scoped to orders: the filter stays inside it)
//	task 3: orders-ops-2, ids [orders]            (visible to orders-ops: recorded with scope [orders])
//	task 4: admin, ids [orders]                   (hidden from scoped tokens: it could have touched any queue)
type fixture struct {
	st      *store.Store
	dsn     string
	ops     *ops.Service
	msgs    []int64 // ids, orders first
	tasks   []int64 // ids of tasks 1-4
	replays *replay.Service
}

func newFixture(t *testing.T, tweak ...func(*ops.Config)) *fixture {
	t.Helper()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	discard := slog.New(slog.NewTextHandler(io.Discard, nil))
	svc, err := replay.New(replay.Config{Store: st, Logger: discard, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	cfg := ops.Config{Store: st, Replays: svc, ConfirmAbove: confirmAbove, Logger: discard}
	// The content is made with the default rules; the doors get the
	// tweaked ones.
	o, err := ops.New(cfg)
	require.NoError(t, err)
	f := &fixture{st: st, dsn: dsn, ops: o, replays: svc}
	defer func() {
		for _, tw := range tweak {
			tw(&cfg)
		}
		f.ops, err = ops.New(cfg)
		require.NoError(t, err)
	}()
	f.deadLetters(t, "orders", 8)
	f.deadLetters(t, "billing", 8)
	page, err := o.ListMessages(ctx, caller("admin"), ops.ListRequest{Filter: store.Filter{Status: "all"}, Limit: 100})
	require.NoError(t, err)
	for _, m := range page.Messages {
		f.msgs = append(f.msgs, m.ID)
	}
	slices.Sort(f.msgs)
	require.Len(t, f.msgs, 16)
	later := 3600
	for _, s := range []struct {
		who string
		req replay.Request
	}{
		{"admin", replay.Request{Filter: &store.Filter{SourceQueue: "billing"}, DelaySeconds: later}},
		{"admin", replay.Request{Filter: &store.Filter{SourceQueue: "orders"}, DelaySeconds: later}},
		{"orders-ops-2", replay.Request{IDs: []int64{f.orders(0)}, DelaySeconds: later}},
		{"admin", replay.Request{IDs: []int64{f.orders(1)}, DelaySeconds: later}},
	} {
		task, err := o.StartReplay(ctx, caller(s.who), ops.ReplayRequest{Request: s.req, Confirm: true})
		require.NoError(t, err)
		f.tasks = append(f.tasks, task.ID)
	}
	return f
}

// deadLetters stores n pending messages of queue.
func (f *fixture) deadLetters(t *testing.T, queue string, n int) {
	t.Helper()
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for i := range n {
		b.Messages = append(b.Messages, store.NewMessage{
			SourceQueue: queue, DeadLetterQueue: "dlq", Reason: "rejected", Properties: []byte(`{}`), Headers: []byte(`{}`),
			Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), FirstFailedAt: time.Now(), FailedAt: time.Now(), Fingerprint: int64(i + 1),
		})
	}
	_, err := f.st.IngestBatch(context.Background(), b)
	require.NoError(t, err)
}

func (f *fixture) orders(i int) int64  { return f.msgs[i] }
func (f *fixture) billing(i int) int64 { return f.msgs[8+i] }

func caller(name string) ops.Caller {
	p, err := authenticator().Authenticate(tokenOf(name))
	if err != nil {
		panic(err)
	}
	return ops.Caller{Principal: p, Via: "test", RequestID: "setup"}
}

func authenticator() *auth.Authenticator {
	a, err := auth.New(auth.Config{AdminToken: adminToken, Tokens: tokens, RatePerSecond: -1, FailureRate: -1})
	if err != nil {
		panic(err)
	}
	return a
}

// outcome is what a door answered, in door-neutral words: the code
// (ok or the ops error code), and the parts of the result the table
// compares.
type outcome struct {
	Code string
	// Tasks are the task numbers (1-based, in fixture order; 0 for a task
	// the table started) a listing showed.
	Tasks []int
	// Status of a task shown or cancelled; Matched and Changed of a bulk
	// action; Requested of a replay.
	Status           string
	Matched, Changed int64
	Requested        int64
	// Count of an approval request shown or decided.
	Count int64
	// Policies a listing showed, by name.
	Policies []string
	// ApprovalRequired and Approvers of a dry run's answer: whether the
	// real action would wait for approval, and who may give it.
	ApprovalRequired *bool
	Approvers        []string
}

// required is an outcome's ApprovalRequired.
func required(b bool) *bool { return &b }

// door sends one request as the named token, with requestID as the id the
// audit row must carry.
type door interface {
	name() string
	do(t *testing.T, who, requestID string, r request) outcome
	fixture() *fixture
}

// request is one row's action, with ids resolved against a fixture.
type request struct {
	action  string // list_replays, get_replay, cancel_replay, replay, acknowledge, delete, edit_replay, ...
	id      int64  // a task, message or approval id
	ids     []int64
	filter  *store.Filter
	limit   int
	dryRun  bool
	confirm bool
	body    string // edit_replay's new body (sent base64: the fixture's messages have no content type)
	name    string // a policy (pause_policy, resume_policy)
}

type row struct {
	who    string
	req    func(f *fixture) request
	expect outcome
	// mutates says an ok answer changed something: exactly one audit row
	// must carry its request id. Refusals and reads write none.
	mutates bool
}

func TestEveryDoorAnswersAlike(t *testing.T) {
	t.Parallel()
	task := func(n int) func(f *fixture) request {
		return func(f *fixture) request { return request{action: "get_replay", id: f.tasks[n-1]} }
	}
	cancel := func(n int) func(f *fixture) request {
		return func(f *fixture) request { return request{action: "cancel_replay", id: f.tasks[n-1]} }
	}
	list := func(f *fixture) request { return request{action: "list_replays"} }
	rows := []row{
		// Task visibility: one rule for every door. Tasks 2 and 3 are the
		// two cases the doors used to disagree on.
		{who: "viewer", req: list, expect: outcome{Code: "ok", Tasks: []int{4, 3, 2, 1}}},
		{who: "orders-ops", req: list, expect: outcome{Code: "ok", Tasks: []int{3, 2}}},
		{who: "orders-ops-2", req: list, expect: outcome{Code: "ok", Tasks: []int{3, 2}}},
		{who: "orders-ops", req: task(1), expect: outcome{Code: ops.CodeNotFound}},
		{who: "orders-ops", req: task(2), expect: outcome{Code: "ok", Status: replay.StatusScheduled}},
		{who: "orders-ops", req: task(3), expect: outcome{Code: "ok", Status: replay.StatusScheduled}},
		{who: "orders-ops", req: task(4), expect: outcome{Code: ops.CodeNotFound}},
		{who: "viewer", req: task(4), expect: outcome{Code: "ok", Status: replay.StatusScheduled}},
		// Cancel: the role, then visibility.
		{who: "viewer", req: cancel(1), expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: cancel(1), expect: outcome{Code: ops.CodeNotFound}},
		{who: "orders-ops", req: cancel(4), expect: outcome{Code: ops.CodeNotFound}},
		{who: "orders-ops", req: cancel(3), expect: outcome{Code: "ok", Status: replay.StatusCancelled}, mutates: true},
		{who: "op", req: cancel(2), expect: outcome{Code: "ok", Status: replay.StatusCancelled}, mutates: true},
		// Replay: role, scope, ids outside the scope, the threshold, dry runs.
		{who: "viewer", req: func(f *fixture) request { return request{action: "replay", ids: []int64{f.orders(2)}} },
			expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: func(*fixture) request {
			return request{action: "replay", filter: &store.Filter{SourceQueue: "billing"}}
		}, expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: func(f *fixture) request { return request{action: "replay", ids: []int64{f.billing(0)}} },
			expect: outcome{Code: ops.CodeNotFound}},
		{who: "op", req: func(*fixture) request { return request{action: "replay", filter: &store.Filter{}} },
			expect: outcome{Code: ops.CodeConfirmRequired}},
		{who: "op", req: func(*fixture) request { return request{action: "replay", filter: &store.Filter{}, dryRun: true} },
			expect: outcome{Code: "ok", Status: "dry_run", Requested: 16, ApprovalRequired: required(false)}},
		{who: "op", req: func(*fixture) request { return request{action: "replay", filter: &store.Filter{}, limit: confirmAbove} },
			expect: outcome{Code: "ok", Status: replay.StatusScheduled, Requested: confirmAbove}, mutates: true},
		{who: "orders-ops", req: func(*fixture) request {
			return request{action: "replay", filter: &store.Filter{}, confirm: true}
		}, expect: outcome{Code: "ok", Status: replay.StatusScheduled, Requested: 8}, mutates: true},
		{who: "orders-ops", req: list, expect: outcome{Code: "ok", Tasks: []int{0, 3, 2}}},
		// Acknowledge and delete: role, scope, threshold.
		{who: "viewer", req: func(f *fixture) request { return request{action: "acknowledge", ids: []int64{f.billing(1)}} },
			expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: func(*fixture) request {
			return request{action: "acknowledge", filter: &store.Filter{SourceQueue: "billing"}}
		}, expect: outcome{Code: ops.CodeForbidden}},
		// An id outside the scope matches nothing: reported not found in
		// the result, nothing changes.
		{who: "orders-ops", req: func(f *fixture) request { return request{action: "acknowledge", ids: []int64{f.billing(1)}} },
			expect: outcome{Code: "ok"}},
		{who: "orders-ops", req: func(*fixture) request { return request{action: "acknowledge", filter: &store.Filter{}} },
			expect: outcome{Code: ops.CodeConfirmRequired}},
		{who: "op", req: func(f *fixture) request {
			return request{action: "acknowledge", ids: []int64{f.billing(1), f.billing(2)}}
		},
			expect: outcome{Code: "ok", Matched: 2, Changed: 2}, mutates: true},
		{who: "op", req: func(f *fixture) request { return request{action: "delete", ids: []int64{f.billing(3)}} },
			expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: func(f *fixture) request { return request{action: "delete", ids: []int64{f.orders(7)}} },
			expect: outcome{Code: ops.CodeForbidden}},
		{who: "admin", req: func(f *fixture) request { return request{action: "delete", ids: []int64{f.billing(3)}} },
			expect: outcome{Code: "ok", Matched: 1, Changed: 1}, mutates: true},
		{who: "admin", req: func(*fixture) request {
			return request{action: "delete", filter: &store.Filter{SourceQueue: "billing"}, dryRun: true}
		}, expect: outcome{Code: "ok", Matched: 5, ApprovalRequired: required(false)}}, // 8 billing, 2 acknowledged, 1 deleted
		// Edit-then-replay: role, scope, one edit at a time.
		{who: "viewer", req: func(f *fixture) request { return request{action: "edit_replay", id: f.billing(4), body: `{"n":40}`} },
			expect: outcome{Code: ops.CodeForbidden}},
		{who: "orders-ops", req: func(f *fixture) request { return request{action: "edit_replay", id: f.billing(4), body: `{"n":40}`} },
			expect: outcome{Code: ops.CodeNotFound}},
		{who: "op", req: func(f *fixture) request {
			return request{action: "edit_replay", id: f.billing(4), body: `{"n":40}`, dryRun: true}
		}, expect: outcome{Code: "ok", Status: "dry_run"}},
		{who: "op", req: func(f *fixture) request { return request{action: "edit_replay", id: f.billing(4), body: `{"n":40}`} },
			expect: outcome{Code: "ok", Status: replay.StatusScheduled, Requested: 1}, mutates: true},
		{who: "admin", req: func(f *fixture) request { return request{action: "edit_replay", id: f.billing(4), body: `{"n":41}`} },
			expect: outcome{Code: ops.CodeConflict}},
	}

	httpDoor := newHTTPDoor(t)
	controlDoor := newControlDoor(t)
	for i, r := range rows {
		var got [2]outcome
		for j, d := range []door{httpDoor, controlDoor} {
			reqID := fmt.Sprintf("row-%d-%s", i, d.name())
			got[j] = d.do(t, r.who, reqID, r.req(d.fixture()))
			audits := countAudit(t, d.fixture(), reqID)
			if r.mutates && got[j].Code == "ok" {
				require.Equal(t, 1, audits, "row %d (%s %s) via %s: one audit row", i, r.who, r.req(d.fixture()).action, d.name())
			} else {
				require.Zero(t, audits, "row %d (%s %s) via %s: no audit row", i, r.who, r.req(d.fixture()).action, d.name())
			}
		}
		require.Equal(t, got[0], got[1], "row %d (%s %s): the doors disagree", i, r.who, r.req(httpDoor.fixture()).action)
		require.Equal(t, r.expect, got[0], "row %d (%s %s)", i, r.who, r.req(httpDoor.fixture()).action)
	}
}

func countAudit(t *testing.T, f *fixture, requestID string) int {
	t.Helper()
	page, err := f.ops.Audit(context.Background(), caller("admin"), ops.AuditRequest{Limit: 1000})
	require.NoError(t, err)
	n := 0
	for _, e := range page.Entries {
		if e.RequestID == requestID {
			n++
		}
	}
	return n
}

// taskNumbers turns task ids into the fixture's numbers (0: a task the
// table started).
func taskNumbers(f *fixture, ts []replay.Task) []int {
	out := []int{}
	for _, t := range ts {
		out = append(out, slices.Index(f.tasks, t.ID)+1)
	}
	return out
}

func fromTask(f *fixture, action string, t replay.Task) outcome {
	o := outcome{Code: "ok", Status: t.Status, ApprovalRequired: t.ApprovalRequired, Approvers: t.Approvers}
	if action == "replay" {
		o.Requested = t.Requested
	}
	return o
}

func fromResult(r store.ActionResult) outcome {
	return outcome{Code: "ok", Matched: r.Matched, Changed: r.Changed, ApprovalRequired: r.ApprovalRequired, Approvers: r.Approvers}
}

// httpDoor is the HTTP API over its own fixture.
type httpDoor struct {
	f   *fixture
	url string
}

func newHTTPDoor(t *testing.T, tweak ...func(*ops.Config)) *httpDoor {
	t.Helper()
	f := newFixture(t, tweak...)
	s, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: f.ops, Auth: authenticator(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)
	return &httpDoor{f: f, url: srv.URL}
}

func (d *httpDoor) name() string      { return "http" }
func (d *httpDoor) fixture() *fixture { return d.f }

func (d *httpDoor) do(t *testing.T, who, requestID string, r request) outcome {
	t.Helper()
	method, path := http.MethodGet, ""
	var body any
	switch r.action {
	case "list_replays":
		path = "/api/v1/replays"
	case "get_replay":
		path = fmt.Sprintf("/api/v1/replays/%d", r.id)
	case "cancel_replay":
		method, path = http.MethodPost, fmt.Sprintf("/api/v1/replays/%d/cancel", r.id)
	case "replay":
		method, path = http.MethodPost, "/api/v1/replays"
		body = map[string]any{"ids": r.ids, "filter": r.filter, "limit": r.limit, "dry_run": r.dryRun, "confirm": r.confirm}
	case "acknowledge", "delete":
		method, path = http.MethodPost, "/api/v1/messages/"+r.action
		body = map[string]any{"ids": r.ids, "filter": r.filter, "limit": r.limit, "dry_run": r.dryRun, "confirm": r.confirm}
	case "edit_replay":
		method, path = http.MethodPost, fmt.Sprintf("/api/v1/messages/%d/edit-replay", r.id)
		body = map[string]any{"body_base64": base64.StdEncoding.EncodeToString([]byte(r.body)), "dry_run": r.dryRun}
	case "list_approvals":
		path = "/api/v1/approvals"
	case "approve", "reject", "withdraw":
		method, path = http.MethodPost, fmt.Sprintf("/api/v1/approvals/%d/%s", r.id, r.action)
	case "list_policies":
		path = "/api/v1/policies"
	case "pause_policy", "resume_policy":
		verb, _, _ := strings.Cut(r.action, "_")
		method, path = http.MethodPost, "/api/v1/policies/"+r.name+"/"+verb
	}
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		require.NoError(t, err)
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, d.url+path, rd)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokenOf(who))
	req.Header.Set("X-Request-Id", requestID)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	if resp.StatusCode >= 300 {
		var e struct {
			Error struct{ Code string } `json:"error"`
		}
		require.NoError(t, json.Unmarshal(raw, &e), "%s", raw)
		code := e.Error.Code
		if code == "invalid_parameter" {
			code = ops.CodeInvalid
		}
		return outcome{Code: code}
	}
	return decodeResult(t, d.f, r.action, raw)
}

func decodeResult(t *testing.T, f *fixture, action string, raw []byte) outcome {
	t.Helper()
	var pending struct{ Approval *store.Approval }
	require.NoError(t, json.Unmarshal(raw, &pending), "%s", raw)
	if pending.Approval != nil {
		return outcome{Code: ops.CodeApprovalPending, Status: pending.Approval.Status, Count: pending.Approval.Count}
	}
	switch action {
	case "edit_replay":
		var res ops.EditResult
		require.NoError(t, json.Unmarshal(raw, &res), "%s", raw)
		if res.Task == nil {
			return outcome{Code: "ok", Status: "dry_run"}
		}
		return outcome{Code: "ok", Status: res.Task.Status, Requested: res.Task.Requested}
	case "approve", "reject", "withdraw":
		var a store.Approval
		require.NoError(t, json.Unmarshal(raw, &a), "%s", raw)
		return outcome{Code: "ok", Status: a.Status, Count: a.Count}
	case "list_approvals":
		var v struct{ Approvals []store.Approval }
		require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
		return outcome{Code: "ok", Count: int64(len(v.Approvals))}
	case "list_policies":
		var v ops.PoliciesView
		require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
		o := outcome{Code: "ok", Policies: []string{}}
		for _, p := range v.Policies {
			o.Policies = append(o.Policies, p.Name)
		}
		return o
	case "pause_policy", "resume_policy":
		var p ops.PolicyView
		require.NoError(t, json.Unmarshal(raw, &p), "%s", raw)
		return outcome{Code: "ok", Status: map[bool]string{true: "paused", false: "active"}[p.Paused]}
	case "list_replays":
		var v struct{ Replays []replay.Task }
		require.NoError(t, json.Unmarshal(raw, &v), "%s", raw)
		return outcome{Code: "ok", Tasks: taskNumbers(f, v.Replays)}
	case "acknowledge", "delete":
		var res store.ActionResult
		require.NoError(t, json.Unmarshal(raw, &res), "%s", raw)
		return fromResult(res)
	}
	var task replay.Task
	require.NoError(t, json.Unmarshal(raw, &task), "%s", raw)
	return fromTask(f, action, task)
}

// controlDoor is the control queue over its own fixture.
type controlDoor struct {
	f       *fixture
	clients map[string]*control.Client
}

func newControlDoor(t *testing.T, tweak ...func(*ops.Config)) *controlDoor {
	t.Helper()
	f := newFixture(t, tweak...)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "doors-test"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	queue := dlqtest.Name(t, "ctl")
	app := dlqtest.Dial(t)
	dlqtest.DeleteQueues(t, app, queue)
	c, err := control.New(control.Config{Conn: conn, Queue: queue, Ops: f.ops, Commands: f.st, Auth: authenticator(),
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		_ = c.Run(ctx)
	}()
	t.Cleanup(func() { cancel(); <-done })
	d := &controlDoor{f: f, clients: map[string]*control.Client{}}
	for _, who := range []string{"admin", "admin-2", "op", "viewer", "orders-ops", "orders-ops-2"} {
		dctx, dcancel := context.WithTimeout(context.Background(), 10*time.Second)
		cl, err := control.Dial(dctx, dlqtest.AMQPURL(), queue, tokenOf(who))
		dcancel()
		require.NoError(t, err)
		t.Cleanup(func() { _ = cl.Close() })
		d.clients[who] = cl
	}
	// The router declares the queue: wait until a command is answered.
	dlqtest.Eventually(t, 20*time.Second, func() bool {
		cctx, ccancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer ccancel()
		a, err := d.clients["viewer"].Call(cctx, control.Command{Command: control.CmdListReplays})
		return err == nil && a.OK
	}, "the control queue does not answer")
	return d
}

func (d *controlDoor) name() string      { return "control" }
func (d *controlDoor) fixture() *fixture { return d.f }

func (d *controlDoor) do(t *testing.T, who, requestID string, r request) outcome {
	t.Helper()
	cmd := control.Command{CommandID: requestID, ID: r.id, Confirm: r.confirm,
		Request: replay.Request{IDs: r.ids, Filter: r.filter, Limit: r.limit, DryRun: r.dryRun}}
	switch r.action {
	case "list_replays":
		cmd.Command = control.CmdListReplays
	case "get_replay":
		cmd.Command = control.CmdReplayStatus
	case "cancel_replay":
		cmd.Command = control.CmdCancelReplay
	case "replay":
		cmd.Command = control.CmdReplay
	case "acknowledge":
		cmd.Command = control.CmdAcknowledge
	case "delete":
		cmd.Command = control.CmdDelete
	case "edit_replay":
		b64 := base64.StdEncoding.EncodeToString([]byte(r.body))
		cmd.Command, cmd.BodyBase64 = control.CmdEditReplay, &b64
	case "list_approvals":
		cmd.Command = control.CmdListApprovals
	case "approve":
		cmd.Command = control.CmdApprove
	case "reject":
		cmd.Command = control.CmdReject
	case "withdraw":
		cmd.Command = control.CmdWithdraw
	case "list_policies":
		cmd.Command = control.CmdListPolicies
	case "pause_policy":
		cmd.Command, cmd.Name = control.CmdPausePolicy, r.name
	case "resume_policy":
		cmd.Command, cmd.Name = control.CmdResumePolicy, r.name
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, err := d.clients[who].Call(ctx, cmd)
	require.NoError(t, err)
	if !a.OK {
		require.NotNil(t, a.Error)
		code := a.Error.Code
		if code == control.CodeInvalidRequest {
			code = ops.CodeInvalid
		}
		return outcome{Code: code}
	}
	return decodeResult(t, d.f, r.action, a.Result)
}
