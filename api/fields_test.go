package api_test

import (
	"net/http"
	"net/url"
	"slices"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// field filters JSON bodies through the listing and through the JSON
// filter of actions: combined with the other filters, refused when
// nothing bounds them, refused to a token that may not see bodies, and an
// invalid path is a 400 naming the problem.
func TestFieldFilterAPI(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.realReplayer = true })
	ids := b.seed(t,
		msg{queue: "orders", body: `{"customer":{"tier":"gold"},"items":[{"sku":"A1"},{"sku":"B2"}],"total":120}`},
		msg{queue: "orders", body: `{"customer":{"tier":"gold"},"items":[{"sku":"C3"}],"total":80}`},
		msg{queue: "orders", body: `{"customer":{"tier":"silver"},"items":[],"total":"120"}`},
		msg{queue: "orders", body: `customer.tier=gold, not JSON`},
		msg{queue: "billing", body: `{"customer":{"tier":"gold"}}`},
	)
	list := func(token string, fields ...string) response {
		t.Helper()
		v := url.Values{"source_queue": {"orders"}, "total": {"true"}}
		for _, f := range fields {
			v.Add("field", f)
		}
		return b.do(t, "GET", "/api/v1/messages?"+v.Encode(), token, nil)
	}
	idsOf := func(r response) ([]int64, *store.Total) {
		t.Helper()
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var page struct {
			Messages []store.Message `json:"messages"`
			Total    *store.Total    `json:"total"`
		}
		r.json(t, &page)
		var out []int64
		for _, m := range page.Messages {
			out = append(out, m.ID)
		}
		slices.Sort(out)
		return out, page.Total
	}

	got, total := idsOf(list(tokViewerB, "customer.tier=gold"))
	require.Equal(t, ids[:2], got)
	require.Equal(t, &store.Total{Value: 2, Exact: true}, total)
	got, _ = idsOf(list(tokViewerB, "customer.tier=gold", "items.sku=A1"))
	require.Equal(t, ids[:1], got, "every field must hold")
	got, _ = idsOf(list(tokOp, "total>=100"))
	require.Equal(t, ids[:1], got, "a number compares as a number: the string \"120\" is not one")
	got, _ = idsOf(list(tokOp, `total="120"`))
	require.Equal(t, ids[2:3], got)
	got, _ = idsOf(list(tokOp, "items.0.sku?"))
	require.Equal(t, ids[:2], got)

	// Paging carries the fields: a cursor is bound to them.
	r := b.do(t, "GET", "/api/v1/messages?source_queue=orders&limit=1&field=customer.tier%3Dgold", tokOp, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	r.json(t, &page)
	require.NotNil(t, page.NextCursor)
	r = b.do(t, "GET", "/api/v1/messages?source_queue=orders&limit=1&field=customer.tier%3Dsilver&cursor="+*page.NextCursor, tokOp, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "cursor")
	require.Equal(t, []int64{ids[1], ids[0]}, b.listAll(t, "/api/v1/messages?source_queue=orders&limit=1&field=customer.tier%3Dgold", tokOp))

	for name, c := range map[string]struct {
		path, token string
		status      int
		says        string
	}{
		"unbounded":           {"/api/v1/messages?field=customer.tier%3Dgold", tokOp, http.StatusBadRequest, "add source_queue, failed_after, group, ids or q"},
		"before alone":        {"/api/v1/messages?failed_before=2030-01-01T00:00:00Z&field=customer.tier%3Dgold", tokOp, http.StatusBadRequest, "source_queue"},
		"empty segment":       {"/api/v1/messages?source_queue=orders&field=customer..tier%3Dgold", tokOp, http.StatusBadRequest, "empty path segment"},
		"no operator":         {"/api/v1/messages?source_queue=orders&field=customer.tier", tokOp, http.StatusBadRequest, "no operator"},
		"ordering a bool":     {"/api/v1/messages?source_queue=orders&field=paid%3Ctrue", tokOp, http.StatusBadRequest, "compares numbers or strings"},
		"no body rights":      {"/api/v1/messages?source_queue=orders&field=customer.tier%3Dgold", tokViewer, http.StatusForbidden, "may not see message bodies"},
		"another param twice": {"/api/v1/messages?source_queue=orders&source_queue=x", tokOp, http.StatusBadRequest, "given 2 times"},
	} {
		r := b.do(t, "GET", c.path, c.token, nil)
		require.Equal(t, c.status, r.status, "%s: %s", name, r.body)
		require.Contains(t, r.errMessage(t), c.says, name)
	}

	// In the JSON filter of an action, and of a replay.
	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{
		"filter": map[string]any{"source_queue": "orders", "fields": []string{"customer.tier=gold"}}, "dry_run": true})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"requested":2`)
	r = b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"filter": map[string]any{"fields": []string{"customer.tier=gold"}}})
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	r = b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{
		"filter": map[string]any{"source_queue": "orders", "fields": []string{"items.sku=C3"}}})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"changed":1`)
	require.EqualValues(t, 1, b.count(t, `SELECT count(*) FROM dead_messages WHERE status = 'acknowledged' AND id = $1`, ids[1]))
}
