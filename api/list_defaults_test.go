package api_test

import (
	"encoding/json"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestListDefaults holds the listing's defaults as PRODUCT.md names them,
// which callers outside the code base rely on: with no parameter,
// GET /api/v1/messages lists pending messages only, 50 to a page, newest
// first; the last page says has_more false with next_cursor null (present,
// not missing); status=all takes every status; limit 1000 is accepted and
// 1001 refused naming limit.
func TestListDefaults(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many("orders", 52)...)
	// The newest message leaves the pending set: a default of "any status"
	// would list it first.
	acked := ids[len(ids)-1]
	r := b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"ids": []int64{acked}})
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)

	page := func(path string) (ids []int64, raw map[string]json.RawMessage) {
		t.Helper()
		r := b.do(t, "GET", path, tokAdmin, nil)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
		r.json(t, &raw)
		var ms []struct {
			ID     int64  `json:"id"`
			Status string `json:"status"`
		}
		require.NoError(t, json.Unmarshal(raw["messages"], &ms))
		for _, m := range ms {
			require.Equal(t, "pending", m.Status, "%s lists only pending messages by default", path)
			ids = append(ids, m.ID)
		}
		return ids, raw
	}

	first, raw := page("/api/v1/messages")
	require.Len(t, first, 50, "the default page size is 50")
	require.Equal(t, ids[len(ids)-2], first[0], "newest pending first")
	require.JSONEq(t, "true", string(raw["has_more"]))
	var cursor string
	require.NoError(t, json.Unmarshal(raw["next_cursor"], &cursor))
	require.NotEmpty(t, cursor)

	last, raw := page("/api/v1/messages?cursor=" + cursor)
	require.Equal(t, []int64{ids[0]}, last)
	require.JSONEq(t, "false", string(raw["has_more"]))
	require.Contains(t, raw, "next_cursor", "next_cursor is present at the end")
	require.Equal(t, "null", string(raw["next_cursor"]))

	r = b.do(t, "GET", "/api/v1/messages?status=all&limit=1000", tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var all struct {
		Messages []struct {
			ID int64 `json:"id"`
		} `json:"messages"`
	}
	r.json(t, &all)
	require.Len(t, all.Messages, 52, "status=all takes every status, limit=1000 is accepted")
	require.Equal(t, acked, all.Messages[0].ID)

	r = b.do(t, "GET", "/api/v1/messages?limit=1001", tokAdmin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Equal(t, "invalid_parameter", r.errCode(t))
	require.True(t, strings.HasPrefix(r.errMessage(t), "limit"), "names the parameter: %s", r.errMessage(t))
}
