package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/store"
)

// seedCategorised stores messages as the consumer does with the default
// category rules.
func (b *bundle) seedCategorised(t *testing.T, ms ...msg) []int64 {
	t.Helper()
	rules, err := category.New(nil, true)
	require.NoError(t, err)
	batch := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for _, m := range ms {
		d := delivery(m)
		nm := consumer.Convert(d, "dlq", time.Now().UTC())
		consumer.Categorize(rules, &nm, d.Headers)
		b.seq++
		nm.Fingerprint = b.seq
		batch.Messages = append(batch.Messages, nm)
	}
	before := b.count(t, `SELECT coalesce(max(id), 0) FROM dead_messages`)
	_, err = b.st.IngestBatch(context.Background(), batch)
	require.NoError(t, err)
	var ids []int64
	rows, err := b.db.Query(context.Background(), `SELECT id FROM dead_messages WHERE id > $1 ORDER BY id`, before)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	return ids
}

// TestCategoryFilter: category is in the message JSON and a filter of
// the listing (every arm of it: plain, by queue, by search), of bulk
// actions (JSON filter), of groups, and counted in stats.
func TestCategoryFilter(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seedCategorised(t,
		msg{queue: "orders", failType: "System.TimeoutException", failText: "The operation has timed out.", messageID: "t-1"},
		msg{queue: "orders", failType: "System.TimeoutException", failText: "The operation has timed out.", messageID: "t-2"},
		msg{queue: "orders", failType: "System.Text.Json.JsonException", failText: "'<' is an invalid start of a value.", messageID: "p-1"},
		msg{queue: "billing", failType: "CardDeclined", failText: "declined by issuer", messageID: "u-1"},
		msg{queue: "billing", reason: "expired", messageID: "t-3"},
	)
	list := func(q url.Values) []string {
		var page struct{ Messages []store.Message }
		r := b.do(t, "GET", "/api/v1/messages?"+q.Encode(), tokViewer, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		r.json(t, &page)
		var out []string
		for _, m := range page.Messages {
			out = append(out, *m.MessageID+":"+m.Category)
		}
		return out
	}
	require.Equal(t, []string{"t-3:transient", "t-2:transient", "t-1:transient"}, list(url.Values{"category": {"transient"}}))
	require.Equal(t, []string{"t-2:transient", "t-1:transient"}, list(url.Values{"category": {"transient"}, "source_queue": {"orders"}}))
	require.Equal(t, []string{"u-1:unknown", "p-1:permanent"}, list(url.Values{"category": {"permanent,unknown"}}))
	require.Equal(t, []string{"p-1:permanent"}, list(url.Values{"category": {"permanent"}, "q": {"invalid start"}}))
	require.Empty(t, list(url.Values{"category": {"permanent"}, "q": {"timed out"}}))

	r := b.do(t, "GET", "/api/v1/messages?category=flaky", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_parameter", r.errCode(t))
	require.Contains(t, r.errMessage(t), `category "flaky"`)
	// The death reason is a fixed set too: a typo is refused, not an
	// empty page.
	r = b.do(t, "GET", "/api/v1/messages?reason=reject", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_parameter", r.errCode(t))
	require.Contains(t, r.errMessage(t), `reason "reject" must be one of rejected, expired, maxlen, delivery_limit, unknown`)

	var m store.Message
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", ids[2]), tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	r.json(t, &m)
	require.Equal(t, category.Permanent, m.Category)
	require.False(t, m.AutoExhausted)

	// A JSON filter: acknowledge what is permanent.
	r = b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": map[string]any{"category": "permanent"}})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var res store.ActionResult
	r.json(t, &res)
	require.Equal(t, int64(1), res.Changed)
	require.Equal(t, int64(1), b.count(t, `SELECT count(*) FROM dead_messages WHERE status = 'acknowledged' AND id = $1`, ids[2]))

	var groups struct{ Groups []store.Group }
	r = b.do(t, "GET", "/api/v1/groups?category=transient", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &groups)
	require.Len(t, groups.Groups, 2)
	for _, g := range groups.Groups {
		require.Equal(t, category.Transient, g.Category)
	}

	var stats store.Stats
	r = b.do(t, "GET", "/api/v1/stats", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	r.json(t, &stats)
	require.Equal(t, store.Counts{Pending: 3}, stats.ByCategory[category.Transient])
	require.Equal(t, store.Counts{Acknowledged: 1}, stats.ByCategory[category.Permanent])
	require.Equal(t, store.Counts{Pending: 1}, stats.ByCategory[category.Unknown])

	// A scoped token's stats count its queues only.
	r = b.do(t, "GET", "/api/v1/stats", tokScoped, nil)
	require.Equal(t, http.StatusOK, r.status)
	r.json(t, &stats)
	require.Equal(t, store.Counts{Pending: 2}, stats.ByCategory[category.Transient])
	require.Equal(t, store.Counts{}, stats.ByCategory[category.Unknown])
}

// TestCategoryCursor: a cursor is bound to the category it was made with.
func TestCategoryCursor(t *testing.T) {
	t.Parallel()
	b := setup(t)
	var ms []msg
	for i := range 3 {
		ms = append(ms, msg{queue: "orders", failType: "System.TimeoutException", failText: "timed out", messageID: fmt.Sprintf("t-%d", i)})
	}
	b.seedCategorised(t, ms...)
	r := b.do(t, "GET", "/api/v1/messages?category=transient&limit=2", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	r.json(t, &page)
	require.NotNil(t, page.NextCursor)
	r = b.do(t, "GET", "/api/v1/messages?category=transient&limit=2&cursor="+*page.NextCursor, tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	r = b.do(t, "GET", "/api/v1/messages?category=permanent&limit=2&cursor="+*page.NextCursor, tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status, "a cursor of another category")
}
