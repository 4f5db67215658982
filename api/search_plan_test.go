package api_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// statementLog records the statements a store runs while it is on.
type statementLog struct {
	mu    sync.Mutex
	on    bool
	stmts []pgx.TraceQueryStartData
}

func (l *statementLog) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.on {
		l.stmts = append(l.stmts, d)
	}
	return ctx
}

func (l *statementLog) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// record runs f and returns the statements the store ran meanwhile.
func (l *statementLog) record(f func()) []pgx.TraceQueryStartData {
	l.mu.Lock()
	l.on, l.stmts = true, nil
	l.mu.Unlock()
	f()
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return l.stmts
}

// unindexedScans returns the plan nodes that read dead_messages without
// an index condition: sequential scans, and index scans walking a whole
// index (as costly at ten million rows).
func unindexedScans(node map[string]any) []string {
	var out []string
	if rel := node["Relation Name"]; rel == "dead_messages" || rel == "message_text" || rel == "text_index_queue" {
		switch node["Node Type"] {
		case "Bitmap Heap Scan":
		case "Index Scan", "Index Only Scan":
			// Two walks newest first are bounded by a LIMIT: the newest
			// waiting rows through the queue's primary key, and the newest
			// documents a text search reads before it asks the GIN index
			// (store textDocArm, whose aliases begin with walk).
			alias, _ := node["Alias"].(string)
			walk := rel == "text_index_queue" || strings.HasPrefix(alias, "walk")
			if node["Index Cond"] == nil && !walk {
				out = append(out, fmt.Sprintf("%s using %s without an index condition (alias %v, filter %v)", node["Node Type"], node["Index Name"], node["Alias"], node["Filter"]))
			}
		default:
			out = append(out, fmt.Sprint(node["Node Type"]))
		}
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		out = append(out, unindexedScans(c.(map[string]any))...)
	}
	return out
}

// rowsRead sums, over the nodes of an EXPLAIN ANALYZE plan that read
// dead_messages, the rows they looked at: returned or filtered out, in
// every loop.
func rowsRead(node map[string]any) float64 {
	var n float64
	if alias, _ := node["Alias"].(string); strings.HasPrefix(alias, "walk") {
		// The newest documents a text search reads one by one before
		// it asks the GIN index (store textDocArm, whose aliases begin
		// with walk): bounded by the walk's LIMIT, not by the matches.
		return 0
	}
	if rel := node["Relation Name"]; rel == "dead_messages" || rel == "message_text" {
		num := func(k string) float64 { v, _ := node[k].(float64); return v }
		n = (num("Actual Rows") + num("Rows Removed by Filter") + num("Rows Removed by Index Recheck")) * max(1, num("Actual Loops"))
	}
	children, _ := node["Plans"].([]any)
	for _, c := range children {
		n += rowsRead(c.(map[string]any))
	}
	return n
}

// TestSearchUsesIndexesInOrder searches through the API by message id,
// header value and failure text (type, fixed text, text with a variable
// part), and checks two things. The answer is newest first (id
// descending), the same on every request and across pages. And every
// statement the store ran for the first page reads dead_messages through
// an index condition and looks at no more rows than its matches (a few
// dozen here, out of 2,007): the plans are those of the statements really
// sent (captured by a pgx tracer), run under EXPLAIN ANALYZE; so does
// every statement reading the text documents (message_text) and the rows
// waiting for theirs (text_index_queue). Dropping the GIN index over the
// search keys, the documents' (message_text_document), or the (group_id,
// status, id) index, fails it. Words of bodies, failure text and header
// values are searched across queues, as phrases and prefixes, through the
// documents once the indexer has run, and through the newest waiting rows
// before.
func TestSearchUsesIndexesInOrder(t *testing.T) {
	t.Parallel()
	var stmts statementLog
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4, Tracer: &stmts, TextSearch: true})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	b := setup(t, func(o *setupOpts) { o.store, o.dsn = st, dsn })

	// Enough rows, and enough failure groups (a real store has hundreds),
	// that the planner's choices are those of a large table; a few rare
	// needles.
	var ms []msg
	for i := range 2000 {
		queue := []string{"orders", "billing"}[i%2]
		ms = append(ms, msg{
			queue: queue, failType: fmt.Sprintf("Error%03d", i%200), failText: fmt.Sprintf("upstream took %dms", 1000+i%500),
			messageID: fmt.Sprintf("%s-%05d", queue, i), body: fmt.Sprintf(`{"n":%d}`, i),
			headers: amqp.Table{"trace_id": fmt.Sprintf("trace-%05d", i)},
		})
	}
	for i := range 7 {
		ms = append(ms, msg{queue: []string{"orders", "audit"}[i%2], failType: "LedgerLocked", failText: fmt.Sprintf("ledger %d is locked by batch 77", 10+i),
			messageID: fmt.Sprintf("ledger-%d", i), body: fmt.Sprintf(`{"note":"ledger frozen by auditor Quinlan","n":%d}`, i),
			headers: amqp.Table{"tenant": "acme-corp", "x-approver": "Odile Marchetti"}})
	}
	var ids []int64
	for chunk := range slices.Chunk(ms, 500) {
		ids = append(ids, b.seed(t, chunk...)...)
	}
	dlqtest.IndexText(t, st)
	b.exec(t, `ANALYZE dead_messages`)
	b.exec(t, `ANALYZE failure_groups`)
	b.exec(t, `ANALYZE message_text`)
	ledger := slices.Clone(ids[2000:])
	slices.Reverse(ledger)
	var ledgerAudit []int64
	for i, id := range ledger {
		if (6-i)%2 == 1 {
			ledgerAudit = append(ledgerAudit, id)
		}
	}

	type searchCase struct {
		q, extra string
		want     []int64
		tok      string // default: a viewer, who may not see bodies
	}
	cases := []searchCase{
		{"billing-00041", "", []int64{ids[41]}, ""},         // message id
		{"TRACE-01234", "", []int64{ids[1234]}, ""},         // header value, any case
		{"acme-corp", "", ledger, ""},                       // a header value several share
		{"LedgerLocked", "", ledger, ""},                    // failure type
		{"is locked by batch", "", ledger, ""},              // fixed failure text
		{"ledger 13 is locked", "", []int64{ids[2003]}, ""}, // failure text with a variable part
		{"Error042", "", []int64{ids[1842], ids[1642], ids[1442], ids[1242], ids[1042], ids[842], ids[642], ids[442], ids[242], ids[42]}, ""}, // failure type
		{"took 1235ms", "&source_queue=billing", []int64{ids[1735], ids[1235], ids[735], ids[235]}, ""},                                       // with a queue
		{q: "frozen by auditor", extra: "", want: ledger, tok: tokOp},                                                                         // a phrase in bodies, across queues (text index)
		{q: "frozen by auditor", extra: "", want: nil},                                                                                        // not for a caller who may not see bodies
		{q: `"Auditor Quinlan"`, extra: "", want: ledger, tok: tokOp},                                                                         // quoted
		{q: "Quinl*", extra: "", want: ledger, tok: tokOp},                                                                                    // a prefix
		{q: "frozen by aud*", extra: "", want: ledger, tok: tokOp},                                                                            // a phrase ending in a prefix
		{q: "odile marchetti", extra: "", want: ledger},                                                                                       // words of a header value
		{q: "frozen by auditor", extra: "&source_queue=audit", want: ledgerAudit, tok: tokOp},                                                 // with a queue
		{q: "auditor frozen", extra: "", want: nil, tok: tokOp},                                                                               // the words, not the phrase
	}
	check := func(c searchCase) {
		path := "/api/v1/messages?limit=3&q=" + url.QueryEscape(c.q) + c.extra
		tok := cmp.Or(c.tok, tokViewer)
		// The first page, whose plans are checked.
		sent := stmts.record(func() {
			require.Equal(t, http.StatusOK, b.do(t, "GET", path, tok, nil).status)
		})
		got := b.listAll(t, path, tok)
		require.Equal(t, c.want, got, "q=%q: newest first, each once", c.q)
		require.Equal(t, got, b.listAll(t, path, tok), "q=%q: the same answer again", c.q)

		explained := 0
		for _, s := range sent {
			sql := strings.TrimSpace(s.SQL)
			if !strings.HasPrefix(sql, "SELECT") || !strings.Contains(sql, "dead_messages") {
				continue
			}
			explained++
			plan := explainJSON(t, b.db, sql, s.Args)
			require.Empty(t, unindexedScans(plan), "q=%q: a statement reads dead_messages without an index:\n%s", c.q, sql)
			require.LessOrEqual(t, rowsRead(plan), 50.0, "q=%q: a statement reads more of dead_messages than its matches:\n%s", c.q, sql)
		}
		require.Positive(t, explained, "q=%q: no statement was captured", c.q)
	}
	for _, c := range cases {
		check(c)
	}
	// Before the indexer has run: the ledger rows wait for their
	// documents, and their body and failure words are found through the
	// newest waiting rows (their header words once indexed).
	b.exec(t, `DELETE FROM message_text WHERE id = ANY($1)`, ledger)
	b.exec(t, `INSERT INTO text_index_queue (ids) VALUES ($1)`, ledger)
	b.exec(t, `ANALYZE text_index_queue`)
	for _, c := range cases {
		if strings.Contains(c.q, "Quinl") || strings.Contains(c.q, "frozen") || strings.Contains(c.q, "uditor") {
			check(c)
		}
	}
	// More rows waiting than a search reads (an older range, as migration
	// 00079 queues): the newest are still found, and the answer says the
	// words of the others were not looked for.
	b.exec(t, `INSERT INTO text_index_queue (seq, lo, hi) VALUES (0, 50000000, $1)`, 50000000+store.TextTailMax)
	var page struct {
		Messages   []struct{ ID int64 } `json:"messages"`
		Incomplete *bool                `json:"text_search_incomplete"`
		Total      *store.Total         `json:"total"`
	}
	b.do(t, "GET", "/api/v1/messages?limit=10&total=true&q="+url.QueryEscape("frozen by auditor"), tokOp, nil).json(t, &page)
	require.Len(t, page.Messages, len(ledger))
	require.NotNil(t, page.Incomplete)
	require.True(t, *page.Incomplete)
	require.NotNil(t, page.Total)
	require.False(t, page.Total.Exact, "a count that may miss matches is a lower bound")
	dlqtest.IndexText(t, st)
	page.Incomplete, page.Total = nil, nil
	b.do(t, "GET", "/api/v1/messages?limit=10&total=true&q="+url.QueryEscape("frozen by auditor"), tokOp, nil).json(t, &page)
	require.Nil(t, page.Incomplete, "absent once the indexer has caught up")
	require.NotNil(t, page.Total)
	require.True(t, page.Total.Exact)
	require.EqualValues(t, len(ledger), page.Total.Value)

	// Rows being replayed are left out of the listing and search indexes
	// (migration 00061) and read in a branch of their own: claimed, the
	// ledger rows are still found, with status=replaying and with
	// status=all, and those statements still read through indexes.
	b.exec(t, `UPDATE dead_messages SET status = 'replaying', claim_owner = 'plan-test', claim_expires_at = now() + interval '1 hour'
WHERE id = ANY($1)`, ledger)
	for _, c := range []struct{ q, status string }{
		{"acme-corp", "replaying"}, {"acme-corp", "all"}, {"LedgerLocked", "all"}, {"ledger-3", "replaying"}, {"is locked by batch", "pending,replaying"},
		{"odile marchetti", "all"}, {"Marchet*", "replaying"},
	} {
		want := ledger
		if c.q == "ledger-3" {
			want = []int64{ids[2003]}
		}
		path := "/api/v1/messages?limit=3&status=" + url.QueryEscape(c.status) + "&q=" + url.QueryEscape(c.q)
		sent := stmts.record(func() {
			require.Equal(t, http.StatusOK, b.do(t, "GET", path, tokViewer, nil).status)
		})
		require.Equal(t, want, b.listAll(t, path, tokViewer), "q=%q status=%s", c.q, c.status)
		for _, s := range sent {
			sql := strings.TrimSpace(s.SQL)
			if !strings.HasPrefix(sql, "SELECT") || !strings.Contains(sql, "dead_messages") {
				continue
			}
			plan := explainJSON(t, b.db, sql, s.Args)
			// Reading a claim index whole is reading the replaying rows,
			// a replay window's worth per running task.
			scans := slices.DeleteFunc(unindexedScans(plan), func(s string) bool {
				return strings.Contains(s, " using dead_messages_claim")
			})
			require.Empty(t, scans, "q=%q status=%s: a statement reads dead_messages without an index:\n%s", c.q, c.status, sql)
		}
	}
}

// explainJSON runs sql with args under EXPLAIN ANALYZE and returns the
// plan. Sequential page reads are priced as a table of millions of rows
// would make them, so that the plans are those of a large store rather
// than of this small one.
func explainJSON(t *testing.T, db *pgxpool.Pool, sql string, args []any) map[string]any {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	tx, err := db.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	for _, set := range []string{`SET LOCAL seq_page_cost = 1000`} {
		_, err = tx.Exec(ctx, set)
		require.NoError(t, err)
	}
	var raw []byte
	require.NoError(t, tx.QueryRow(ctx, `EXPLAIN (ANALYZE, FORMAT JSON) `+sql, args...).Scan(&raw))
	var plans []struct {
		Plan map[string]any `json:"Plan"`
	}
	require.NoError(t, json.Unmarshal(raw, &plans))
	require.Len(t, plans, 1)
	return plans[0].Plan
}
