package api_test

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// total=true adds how many messages the filter selects: exact from the
// counter tables or a count within budget, otherwise an estimate marked
// as one. Without it there is no total.
func TestListTotal(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.ops = func(c *ops.Config) { c.CountCap = 10 } })
	b.seed(t, many("orders", 30)...)
	b.seed(t, many("billing", 5)...)
	since := url.QueryEscape(time.Now().Add(-time.Hour).UTC().Format(time.RFC3339))

	total := func(path string) *store.Total {
		t.Helper()
		r := b.do(t, "GET", path, tokViewer, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var page struct {
			Total      *store.Total `json:"total"`
			NextCursor *string      `json:"next_cursor"`
		}
		r.json(t, &page)
		return page.Total
	}
	require.Nil(t, total("/api/v1/messages"), "no total unless asked")
	require.Equal(t, &store.Total{Value: 35, Exact: true}, total("/api/v1/messages?total=true"))
	require.Equal(t, &store.Total{Value: 30, Exact: true}, total("/api/v1/messages?total=true&source_queue=orders&limit=5"))
	require.Equal(t, &store.Total{Value: 0, Exact: true}, total("/api/v1/messages?total=true&status=acknowledged"))
	require.Equal(t, &store.Total{Value: 5, Exact: true}, total("/api/v1/messages?total=true&source_queue=billing&failed_after="+since),
		"a selective filter is counted")
	require.Equal(t, &store.Total{Value: 1, Exact: true}, total("/api/v1/messages?total=true&q=orders-0007"))

	// Thirty rows in a time range is more than this server counts (cap
	// 10): an estimate, within what is known.
	est := total("/api/v1/messages?total=true&source_queue=orders&failed_after=" + since)
	require.NotNil(t, est)
	require.False(t, est.Exact, "%+v", est)
	require.GreaterOrEqual(t, est.Value, int64(10), "at least what was counted")
	require.LessOrEqual(t, est.Value, int64(30), "at most what the queue holds")

	// Every page of a listing carries the total of the whole filter.
	r := b.do(t, "GET", "/api/v1/messages?total=true&source_queue=orders&limit=20", tokViewer, nil)
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	r.json(t, &page)
	require.NotNil(t, page.NextCursor)
	require.Equal(t, &store.Total{Value: 30, Exact: true}, total("/api/v1/messages?total=true&source_queue=orders&limit=20&cursor="+*page.NextCursor))

	r = b.do(t, "GET", "/api/v1/messages?total=maybe", tokViewer, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "total")
}
