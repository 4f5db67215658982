package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// markReplaying puts a message in the replaying state the way the replay
// service's claim does, counters included.
func (b *bundle) markReplaying(t *testing.T, id int64) {
	t.Helper()
	b.exec(t, `WITH m AS (UPDATE dead_messages SET status = 'replaying' WHERE id = $1 AND status = 'pending'
	             RETURNING source_queue, group_id, body_size)
	UPDATE queue_summary s SET messages = s.messages + CASE s.status WHEN 'replaying' THEN 1 ELSE -1 END,
	       bytes = s.bytes + CASE s.status WHEN 'replaying' THEN m.body_size ELSE -m.body_size END
	FROM m WHERE s.source_queue = m.source_queue AND s.status IN ('pending', 'replaying')`, id)
	b.exec(t, `INSERT INTO queue_summary (source_queue, status, messages, bytes)
	  SELECT source_queue, 'replaying', 1, body_size FROM dead_messages WHERE id = $1
	  ON CONFLICT DO NOTHING`, id)
	b.exec(t, `UPDATE failure_groups SET pending = pending - 1, replaying = replaying + 1
	  WHERE id = (SELECT group_id FROM dead_messages WHERE id = $1)`, id)
}

func (b *bundle) actionResult(t *testing.T, r response) store.ActionResult {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var res store.ActionResult
	r.json(t, &res)
	return res
}

// requireCounters recounts dead_messages and compares with the counter
// tables the API reads (status, stats, groups).
func (b *bundle) requireCounters(t *testing.T) {
	t.Helper()
	require.Zero(t, b.count(t, `
SELECT count(*) FROM (
  SELECT source_queue, status, count(*) AS n, sum(body_size) AS b FROM dead_messages GROUP BY 1, 2
) a FULL JOIN (SELECT * FROM queue_summary WHERE messages <> 0 OR bytes <> 0) s USING (source_queue, status)
WHERE a.n IS DISTINCT FROM s.messages OR a.b IS DISTINCT FROM s.bytes`), "queue_summary drifted")
	require.Zero(t, b.count(t, `
WITH a AS (
  SELECT group_id,
    count(*) FILTER (WHERE status = 'pending') AS p, count(*) FILTER (WHERE status = 'replaying') AS rg,
    count(*) FILTER (WHERE status = 'replayed') AS rd, count(*) FILTER (WHERE status = 'acknowledged') AS ak
  FROM dead_messages WHERE group_id IS NOT NULL GROUP BY 1)
SELECT count(*) FROM a FULL JOIN failure_groups g ON g.id = a.group_id
WHERE coalesce(a.p, 0) <> g.pending OR coalesce(a.rg, 0) <> g.replaying OR coalesce(a.rd, 0) <> g.replayed
   OR coalesce(a.ak, 0) <> g.acknowledged OR g.id IS NULL`), "failure_groups drifted")
}

func TestAcknowledgeAndDelete(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.confirmAbove = 5 })
	orders := b.seed(t, many("orders", 10)...)
	billing := b.seed(t, many("billing", 4)...)
	audits := func() int64 { return b.count(t, `SELECT count(*) FROM audit_log`) }

	// Acknowledge by ids.
	res := b.actionResult(t, b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"ids": []int64{orders[0], orders[1], 987654}}))
	require.Equal(t, store.ActionResult{Action: "acknowledge", Matched: 2, Changed: 2, NotFound: []int64{987654}}, res)
	r := b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", orders[0]), tokOp, nil)
	var m store.Message
	r.json(t, &m)
	require.Equal(t, "acknowledged", m.Status)
	require.NotNil(t, m.AcknowledgedAt)
	b.requireCounters(t)

	// 409 for a replaying message, by id, for acknowledge and both deletes.
	b.markReplaying(t, orders[2])
	b.requireCounters(t)
	before := audits()
	r = b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"ids": []int64{orders[2], orders[3]}})
	require.Equal(t, http.StatusConflict, r.status, "%s", r.body)
	require.Equal(t, "conflict", r.errCode(t))
	r = b.do(t, "POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"ids": []int64{orders[2]}})
	require.Equal(t, http.StatusConflict, r.status)
	r = b.do(t, "DELETE", fmt.Sprintf("/api/v1/messages/%d", orders[2]), tokAdmin, nil)
	require.Equal(t, http.StatusConflict, r.status)
	require.Equal(t, before, audits(), "refused requests write no audit row")

	// Dry run by filter counts; above the threshold confirm is required.
	res = b.actionResult(t, b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": map[string]any{"source_queue": "orders"}, "dry_run": true}))
	require.NotNil(t, res.ApprovalRequired, "a dry run says whether approval is needed")
	require.False(t, *res.ApprovalRequired, "approval is off: %s", res.ApprovalNote)
	res.DryRunApproval = store.DryRunApproval{}
	require.Equal(t, store.ActionResult{Action: "acknowledge", Matched: 7, DryRun: true}, res, "10 - 2 acknowledged - 1 replaying")
	r = b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": map[string]any{"source_queue": "orders"}})
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "confirm_required", r.errCode(t))
	require.Contains(t, r.errMessage(t), "confirm")
	require.Equal(t, before, audits())
	res = b.actionResult(t, b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": map[string]any{"source_queue": "orders"}, "confirm": true}))
	require.EqualValues(t, 7, res.Changed)
	b.requireCounters(t)

	// Delete by group: the billing TimeoutError group.
	groups, err := b.st.Groups(t.Context(), store.GroupQuery{SourceQueue: "billing"})
	require.NoError(t, err)
	require.Len(t, groups, 1)
	res = b.actionResult(t, b.do(t, "POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"filter": map[string]any{"group": groups[0].ID}}))
	require.EqualValues(t, 4, res.Changed)
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", billing[0]), tokAdmin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	b.requireCounters(t)

	// Single delete, then 404.
	r = b.do(t, "DELETE", fmt.Sprintf("/api/v1/messages/%d", orders[0]), tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r = b.do(t, "DELETE", fmt.Sprintf("/api/v1/messages/%d", orders[0]), tokAdmin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	b.requireCounters(t)

	// Bad bodies: 400 naming the field.
	for body, field := range map[string]string{
		`{}`:                           "ids",
		`{"ids":[1],"filter":{}}`:      "ids",
		`{"ids":[0]}`:                  "ids",
		`{"filter":{"status":"dead"}}`: "status",
		`{"filter":{"colour":"blue"}}`: "colour",
		`{"idz":[1]}`:                  "idz",
		`{"ids":"1"}`:                  "ids",
		`{"filter":{"group":"nope"}}`:  "group",
		`{"filter":{},"limit":-1}`:     "limit",
		`not json`:                     "body",
		`{"ids":[1]} {"ids":[2]}`:      "body",
		`{"filter":{"q":"ab"}}`:        "q",
		``:                             "body",
		`{"filter":{"ids":"1"}}`:       "filter.ids",
		`{"ids":[1,2],"limit":1}`:      "limit",
	} {
		r := b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", body, r.body)
		require.True(t, strings.HasPrefix(r.errMessage(t), field+":") || strings.HasPrefix(r.errMessage(t), field+" "),
			"%s: the message starts with the parameter: %s", body, r.errMessage(t))
	}

	// Audit: one row per mutation, actor, request id, count, selection.
	r = b.do(t, "GET", "/api/v1/audit?limit=2", tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status)
	var page struct {
		Entries    []store.AuditEntry `json:"entries"`
		NextCursor *string            `json:"next_cursor"`
	}
	r.json(t, &page)
	require.Len(t, page.Entries, 2)
	require.Equal(t, "delete", page.Entries[0].Action)
	require.Equal(t, "admin", page.Entries[0].Actor)
	require.Equal(t, "api", page.Entries[0].Via)
	require.EqualValues(t, 1, page.Entries[0].Count)
	require.NotEmpty(t, page.Entries[0].RequestID)
	var sel map[string]any
	require.NoError(t, json.Unmarshal(page.Entries[1].Selection, &sel))
	require.Equal(t, groups[0].ID, sel["group"])
	require.NotNil(t, page.NextCursor)
	r = b.do(t, "GET", "/api/v1/audit?limit=2&cursor="+*page.NextCursor, tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status)
	// ack ids, ack filter (confirm), delete group, delete one = 4 mutations.
	require.EqualValues(t, 4, audits())
	r = b.do(t, "GET", "/api/v1/audit?action=acknowledge&actor=ops", tokAdmin, nil)
	page.Entries = nil
	r.json(t, &page)
	require.Len(t, page.Entries, 2)
}

// TestAuditMatchesMutations runs a mix of mutations and requires exactly
// one audit row per accepted mutation, in order, with the request id of
// the request that made it, the actor, its scope and the count; refusals,
// dry runs and repeated cancels write none. GET /api/v1/audit shows them
// to admins only.
func TestAuditMatchesMutations(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.realReplayer = true })
	ids := b.seed(t, many("orders", 20)...)
	type call struct {
		method, path, token string
		body                any
	}
	calls := []call{
		{"POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"ids": ids[:3]}},
		{"POST", "/api/v1/messages/acknowledge", tokScoped, map[string]any{"ids": ids[3:5]}},
		{"POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"ids": ids[5:7]}},
		{"DELETE", fmt.Sprintf("/api/v1/messages/%d", ids[7]), tokAdmin, nil},
		{"POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": map[string]any{"source_queue": "orders"}, "limit": 4}},
		{"POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"filter": map[string]any{"status": "acknowledged"}}},
		{"POST", "/api/v1/replays", tokScoped, map[string]any{"ids": ids[12:14]}},
		{"POST", "/api/v1/replays/1/cancel", tokScoped, nil},
	}
	var requestIDs []string
	for _, c := range calls {
		r := b.do(t, c.method, c.path, c.token, c.body)
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, r.status, "%s %s: %s", c.method, c.path, r.body)
		requestIDs = append(requestIDs, r.header.Get("X-Request-Id"))
	}
	// Dry runs, refusals and a repeated cancel are not mutations.
	for _, c := range []call{
		{"POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"filter": map[string]any{}, "dry_run": true}},
		{"POST", "/api/v1/messages/delete", tokOp, map[string]any{"ids": ids[10:11]}},
		{"POST", "/api/v1/replays", tokOp, map[string]any{"filter": map[string]any{}, "dry_run": true}},
		{"POST", "/api/v1/replays/1/cancel", tokOp, nil},
		{"POST", "/api/v1/messages/acknowledge", tokScoped, map[string]any{"filter": map[string]any{"source_queue": "billing"}}},
	} {
		r := b.do(t, c.method, c.path, c.token, c.body)
		require.Less(t, r.status, 500, "%s", r.body)
	}

	rows, err := b.db.Query(t.Context(), `SELECT request_id, action, actor, count, scope FROM audit_log ORDER BY id`)
	require.NoError(t, err)
	type row struct {
		action, actor string
		count         int64
		scope         []string
	}
	var got []string
	var rs []row
	for rows.Next() {
		var rid string
		var r row
		require.NoError(t, rows.Scan(&rid, &r.action, &r.actor, &r.count, &r.scope))
		got = append(got, rid)
		rs = append(rs, r)
	}
	require.NoError(t, rows.Err())
	require.Equal(t, requestIDs, got)
	orders := []string{"orders"}
	require.Equal(t, []row{
		{"acknowledge", "ops", 3, nil},
		{"acknowledge", "orders-ops", 2, orders},
		{"delete", "admin", 2, nil},
		{"delete", "admin", 1, nil},
		{"acknowledge", "ops", 4, nil},
		{"delete", "admin", 9, nil},
		{"replay", "orders-ops", 2, orders},
		{"replay_cancel", "orders-ops", 2, orders},
	}, rs)
	b.requireCounters(t)

	// Through the API: not viewers; a scoped operator only the rows of its
	// queue; the scope shown.
	require.Equal(t, http.StatusForbidden, b.do(t, "GET", "/api/v1/audit", tokViewer, nil).status)
	var mine struct{ Entries []store.AuditEntry }
	b.do(t, "GET", "/api/v1/audit?limit=100", tokScoped, nil).json(t, &mine)
	require.Len(t, mine.Entries, 4, "its own three rows, and the operator's acknowledge of orders; not the others'")
	for _, e := range mine.Entries {
		var sel store.Filter
		require.NoError(t, json.Unmarshal(e.Selection, &sel))
		require.True(t, e.Actor == "orders-ops" || sel.SourceQueue == "orders", "%s %s", e.Actor, e.Selection)
	}
	r := b.do(t, "GET", "/api/v1/audit?actor=orders-ops", tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var page struct{ Entries []store.AuditEntry }
	r.json(t, &page)
	require.Len(t, page.Entries, 3)
	for _, e := range page.Entries {
		require.Equal(t, orders, e.Scope)
	}
	r = b.do(t, "GET", "/api/v1/audit?actor=admin&limit=1", tokAdmin, nil)
	require.Contains(t, string(r.body), `"scope":null`, "every queue")
}

func TestScopeNeverLeaks(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders := b.seed(t, many("orders", 3)...)
	billing := b.seed(t, msg{queue: "billing", failType: "LedgerError", failText: "ledger 77 locked", body: "b", messageID: "bill-1"})
	b.markReplaying(t, orders[0])
	_ = billing

	// Lists and search show only the scope.
	for _, id := range b.listAll(t, "/api/v1/messages?status=all", tokScoped) {
		require.Contains(t, orders, id)
	}
	require.Empty(t, b.listAll(t, "/api/v1/messages?q=ledger", tokScoped))
	require.Empty(t, b.listAll(t, "/api/v1/messages?q=bill-1&status=all", tokScoped))

	// Groups, stats and status name only its queues.
	r := b.do(t, "GET", "/api/v1/groups?status=all", tokScoped, nil)
	var gl struct{ Groups []store.Group }
	r.json(t, &gl)
	require.NotEmpty(t, gl.Groups)
	for _, g := range gl.Groups {
		require.Equal(t, "orders", g.SourceQueue)
	}
	r = b.do(t, "GET", "/api/v1/stats", tokScoped, nil)
	require.Equal(t, http.StatusOK, r.status)
	require.NotContains(t, string(r.body), "billing")
	require.NotContains(t, string(r.body), "Ledger")
	var st store.Stats
	r.json(t, &st)
	require.EqualValues(t, 2, st.ByStatus.Pending)
	require.EqualValues(t, 1, st.ByStatus.Replaying)
	r = b.do(t, "GET", "/api/v1/status", tokScoped, nil)
	require.NotContains(t, string(r.body), "billing")

	// Bulk actions never touch other queues.
	res := b.actionResult(t, b.do(t, "POST", "/api/v1/messages/acknowledge", tokScoped, map[string]any{"filter": map[string]any{"status": "all"}}))
	require.EqualValues(t, 2, res.Changed, "only the pending orders (one is replaying)")
	res = b.actionResult(t, b.do(t, "POST", "/api/v1/messages/acknowledge", tokScoped, map[string]any{"ids": billing}))
	require.Equal(t, billing, res.NotFound)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM dead_messages WHERE source_queue = 'billing' AND status = 'pending'`))
	b.requireCounters(t)
}

func TestStatsStatusGroups(t *testing.T) {
	t.Parallel()
	b := setup(t)
	first := b.seed(t, many("orders", 6)...)
	b.seed(t, msg{queue: "billing", reason: "expired", body: "e"}, msg{queue: "billing", reason: "expired", body: "f"})
	ids := b.seed(t, many("orders", 1)...)
	// A repeat failure: replayed before, pending again.
	b.exec(t, `UPDATE dead_messages SET replay_count = 2 WHERE id = $1`, ids[0])
	b.actionResult(t, b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"ids": []int64{first[0]}}))

	r := b.do(t, "GET", "/api/v1/stats", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var st store.Stats
	r.json(t, &st)
	require.Equal(t, store.Counts{Pending: 8, Acknowledged: 1}, st.ByStatus)
	require.Len(t, st.BySourceQueue, 2)
	require.Equal(t, "billing", st.BySourceQueue[0].SourceQueue)
	require.EqualValues(t, 2, st.BySourceQueue[0].Counts.Pending)
	require.Equal(t, store.Counts{Pending: 2}, st.ByReason["expired"])
	require.Equal(t, store.Counts{Pending: 6, Acknowledged: 1}, st.ByReason["rejected"])
	require.NotNil(t, st.OldestPending)
	require.GreaterOrEqual(t, st.OldestPending.AgeSeconds, 0.0)
	require.EqualValues(t, 1, st.RepeatFailures)
	require.EqualValues(t, 1, st.BySourceQueue[1].RepeatFailures)
	require.EqualValues(t, 9, st.Last24h.New)
	require.EqualValues(t, 1, st.Last24h.Acknowledged)
	require.NotEmpty(t, st.TopGroups)
	require.Equal(t, "orders", st.TopGroups[0].SourceQueue)
	require.EqualValues(t, 6, st.TopGroups[0].Counts.Pending)
	require.WithinDuration(t, time.Now(), st.At, time.Minute)

	r = b.do(t, "GET", "/api/v1/status", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	var status struct {
		Queues []store.QueueStats `json:"queues"`
	}
	r.json(t, &status)
	require.Len(t, status.Queues, 2)
	require.EqualValues(t, 6, status.Queues[1].Counts.Pending)
	require.EqualValues(t, 1, status.Queues[1].Counts.Acknowledged)
	require.NotNil(t, status.Queues[1].OldestPendingAt)

	r = b.do(t, "GET", "/api/v1/groups?limit=1", tokViewer, nil)
	var gl struct{ Groups []store.Group }
	r.json(t, &gl)
	require.Len(t, gl.Groups, 1)
	g := gl.Groups[0]
	require.Equal(t, "TimeoutError", g.FailureType)
	require.Equal(t, "upstream took <n>ms", g.Pattern)
	r = b.do(t, "GET", "/api/v1/groups/"+g.ID, tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	r = b.do(t, "GET", "/api/v1/groups/0123456789abcdef", tokViewer, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	r = b.do(t, "GET", "/api/v1/groups/zz", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	r = b.do(t, "GET", "/api/v1/groups?status=bogus", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "status")
	r = b.do(t, "GET", "/api/v1/stats?x=1", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
}

func TestReplayRoutes(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.realReplayer = true })
	ids := b.seed(t, many("orders", 3)...)
	r := b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": ids, "rate_per_second": 10, "target": map[string]any{"exchange": "app", "routing_key": "orders.key"}})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	var task struct {
		ID        int64  `json:"id"`
		Status    string `json:"status"`
		Requested int64  `json:"requested"`
	}
	r.json(t, &task)
	require.EqualValues(t, 3, task.Requested)
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/replays/%d", task.ID), tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	r = b.do(t, "POST", fmt.Sprintf("/api/v1/replays/%d/cancel", task.ID), tokOp, nil)
	require.Equal(t, http.StatusOK, r.status)
	r = b.do(t, "GET", "/api/v1/replays/999", tokViewer, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	r = b.do(t, "GET", "/api/v1/replays/x", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"filter": map[string]any{"source_queue": "orders"}, "dry_run": true})
	require.Equal(t, http.StatusOK, r.status)
	for body, field := range map[string]string{
		`{}`: "ids", `{"ids":[1],"speed":3}`: "speed", `{"filter":{"status":"x"}}`: "status",
		`{"ids":"x"}`: "ids", `{"filter":{"ids":"x"}}`: "filter.ids", `{"ids":[1],"rate_per_second":-1}`: "rate_per_second",
		`{"ids":[1],"filter":{}}`: "ids",
	} {
		r = b.do(t, "POST", "/api/v1/replays", tokOp, body)
		require.Equal(t, http.StatusBadRequest, r.status, "%s", body)
		require.True(t, strings.HasPrefix(r.errMessage(t), field+":") || strings.HasPrefix(r.errMessage(t), field+" "),
			"%s: the message starts with the parameter: %s", body, r.errMessage(t))
	}
	// A scoped operator sees its own tasks, not others' tasks by id.
	r = b.do(t, "GET", "/api/v1/replays", tokScoped, nil)
	var list struct{ Replays []map[string]any }
	r.json(t, &list)
	require.Empty(t, list.Replays)
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/replays/%d", task.ID), tokScoped, nil)
	require.Equal(t, http.StatusNotFound, r.status)

	// Without a replay service the routes say so.
	nb := setup(t)
	r = nb.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": []int64{1}})
	require.Equal(t, http.StatusServiceUnavailable, r.status)
	require.Equal(t, "unavailable", r.errCode(t))
}
