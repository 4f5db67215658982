package api_test

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

func TestGetMessage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, msg{
		queue: "orders", failType: "TimeoutError", failText: "upstream took 1500ms", messageID: "m-1",
		body: `{"order":42}`, headers: amqp.Table{"tenant": "acme", "attempt": int32(3)},
	})
	r := b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", ids[0]), tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var m map[string]any
	r.json(t, &m)
	for _, k := range []string{"id", "message_id", "source_queue", "source_exchange", "source_routing_key",
		"dead_letter_queue", "reason", "death_count", "failure", "properties", "headers", "x_death", "body",
		"body_size", "status", "replay_count", "first_failed_at", "failed_at", "replayed_at", "acknowledged_at"} {
		require.Contains(t, m, k)
	}
	require.Equal(t, "m-1", m["message_id"])
	require.Equal(t, "orders", m["source_queue"])
	require.Equal(t, "app", m["source_exchange"])
	require.Equal(t, "orders.key", m["source_routing_key"])
	require.Equal(t, "rejected", m["reason"])
	require.Equal(t, "pending", m["status"])
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte(`{"order":42}`)), m["body"])
	require.EqualValues(t, len(`{"order":42}`), m["body_size"])
	failure := m["failure"].(map[string]any)
	require.Equal(t, "TimeoutError", failure["type"])
	require.Equal(t, "upstream took 1500ms", failure["message"])
	headers := m["headers"].(map[string]any)
	require.Equal(t, "acme", headers["tenant"])
	require.Equal(t, map[string]any{"type": "int32", "value": float64(3)}, headers["attempt"], "typed header values keep their AMQP type")
	deaths := m["x_death"].([]any)
	require.Len(t, deaths, 1)
	d := deaths[0].(map[string]any)
	require.Equal(t, "orders", d["queue"])
	require.Equal(t, "rejected", d["reason"])
	require.Equal(t, []any{"orders.key"}, d["routing_keys"])
	_, err := time.Parse(time.RFC3339, m["failed_at"].(string))
	require.NoError(t, err)
	require.Nil(t, m["acknowledged_at"])

	// A viewer without the bodies permission gets the message without body.
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", ids[0]), tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	m = nil
	r.json(t, &m)
	require.NotContains(t, m, "body")
	r = b.do(t, "GET", fmt.Sprintf("/api/v1/messages/%d", ids[0]), tokViewerB, nil)
	m = nil
	r.json(t, &m)
	require.Contains(t, m, "body")

	// Errors: unknown id 404, bad id 400 naming it.
	r = b.do(t, "GET", "/api/v1/messages/999999", tokAdmin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", r.errCode(t))
	r = b.do(t, "GET", "/api/v1/messages/abc", tokAdmin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "id")
}

func TestListMessages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	orders := b.seed(t, many("orders", 7)...)
	billing := b.seed(t, many("billing", 5)...)
	expired := b.seed(t, msg{queue: "orders", reason: "expired", body: "x"})

	// Newest first, bodies only when asked.
	r := b.do(t, "GET", "/api/v1/messages?limit=3", tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status)
	var page struct {
		Messages   []map[string]any `json:"messages"`
		NextCursor *string          `json:"next_cursor"`
		HasMore    bool             `json:"has_more"`
	}
	r.json(t, &page)
	require.Len(t, page.Messages, 3)
	require.True(t, page.HasMore)
	require.EqualValues(t, expired[0], page.Messages[0]["id"])
	require.NotContains(t, page.Messages[0], "body")

	all := b.listAll(t, "/api/v1/messages?limit=4", tokAdmin)
	want := slices.Concat(orders, billing, expired)
	slices.Reverse(want)
	require.Equal(t, want, all)

	// Filters.
	require.ElementsMatch(t, billing, b.listAll(t, "/api/v1/messages?source_queue=billing", tokAdmin))
	require.Equal(t, expired, b.listAll(t, "/api/v1/messages?reason=expired", tokAdmin))
	future := url.QueryEscape(time.Now().Add(time.Hour).Format(time.RFC3339))
	require.Empty(t, b.listAll(t, "/api/v1/messages?failed_after="+future, tokAdmin))
	require.Len(t, b.listAll(t, "/api/v1/messages?failed_before="+future, tokAdmin), 13)
	require.Empty(t, b.listAll(t, "/api/v1/messages?status=acknowledged", tokAdmin))
	require.Len(t, b.listAll(t, "/api/v1/messages?status=all", tokAdmin), 13)

	// Group filter: the TimeoutError messages of orders form one group.
	groups, err := b.st.Groups(t.Context(), store.GroupQuery{SourceQueue: "orders"})
	require.NoError(t, err)
	var timeout store.Group
	for _, g := range groups {
		if g.FailureType == "TimeoutError" {
			timeout = g
		}
	}
	require.Equal(t, "upstream took <n>ms", timeout.Pattern)
	require.EqualValues(t, 7, timeout.Counts.Pending)
	require.ElementsMatch(t, orders, b.listAll(t, "/api/v1/messages?group="+timeout.ID, tokAdmin))

	// include_body returns bodies, except to viewers without permission.
	r = b.do(t, "GET", "/api/v1/messages?include_body=true&limit=1", tokViewerB, nil)
	require.Equal(t, http.StatusOK, r.status)
	page.Messages = nil
	r.json(t, &page)
	require.Equal(t, base64.StdEncoding.EncodeToString([]byte("x")), page.Messages[0]["body"])
	r = b.do(t, "GET", "/api/v1/messages?include_body=true", tokViewer, nil)
	require.Equal(t, http.StatusForbidden, r.status)
	require.Contains(t, r.errMessage(t), "include_body")

	// Bad parameters: 400 naming the parameter.
	for param, value := range map[string]string{
		"limit": "0", "status": "dead", "failed_after": "yesterday", "include_body": "maybe",
		"cursor": "AAAA", "group": "xyz", "q": "ab", "colour": "blue",
	} {
		r := b.do(t, "GET", "/api/v1/messages?"+param+"="+url.QueryEscape(value), tokAdmin, nil)
		require.Equal(t, http.StatusBadRequest, r.status, "%s=%s: %s", param, value, r.body)
		require.Equal(t, "invalid_parameter", r.errCode(t))
		require.True(t, strings.HasPrefix(r.errMessage(t), param), "the message starts with the parameter: %s", r.errMessage(t))
	}
	r = b.do(t, "GET", "/api/v1/messages?limit=1001", tokAdmin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	r = b.do(t, "GET", "/api/v1/messages?limit=1&limit=2", tokAdmin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
}

func TestCursorIsTiedToItsQuery(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many("orders", 5)...)
	r := b.do(t, "GET", "/api/v1/messages?limit=2&source_queue=orders", tokAdmin, nil)
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	r.json(t, &page)
	require.NotNil(t, page.NextCursor)
	c := *page.NextCursor
	// Same query: fine. Other filters, or an edited cursor: 400 naming cursor.
	require.Equal(t, http.StatusOK, b.do(t, "GET", "/api/v1/messages?limit=2&source_queue=orders&cursor="+c, tokAdmin, nil).status)
	r = b.do(t, "GET", "/api/v1/messages?limit=2&source_queue=billing&cursor="+c, tokAdmin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "cursor")
	edited := []byte(c)
	edited[3] ^= 1
	r = b.do(t, "GET", "/api/v1/messages?limit=2&source_queue=orders&cursor="+string(edited), tokAdmin, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "cursor")
}

// TestPaginationDuringInserts pages through every message while new ones
// keep arriving: each message that existed at the start is seen exactly
// once, whatever arrives meanwhile.
func TestPaginationDuringInserts(t *testing.T) {
	t.Parallel()
	b := setup(t)
	initial := b.seed(t, many("orders", 300)...)
	var (
		stop     atomic.Bool
		wg       sync.WaitGroup
		inserted atomic.Int64
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; !stop.Load(); i++ {
			batch := many("orders", 5)
			for j := range batch {
				batch[j].messageID = fmt.Sprintf("late-%d-%d", i, j)
			}
			b.seed(t, batch...)
			inserted.Add(5)
		}
	}()
	var seen []int64
	path := "/api/v1/messages?source_queue=orders&limit=7"
	next := path
	for {
		r := b.do(t, "GET", next, tokScoped, nil)
		require.Equal(t, http.StatusOK, r.status)
		var page struct {
			Messages   []store.Message `json:"messages"`
			NextCursor *string         `json:"next_cursor"`
		}
		r.json(t, &page)
		for _, m := range page.Messages {
			seen = append(seen, m.ID)
		}
		if page.NextCursor == nil {
			break
		}
		next = path + "&cursor=" + *page.NextCursor
	}
	stop.Store(true)
	wg.Wait()
	require.Greater(t, inserted.Load(), int64(0), "inserts ran during the listing")
	counts := map[int64]int{}
	for _, id := range seen {
		counts[id]++
	}
	for id, n := range counts {
		require.Equal(t, 1, n, "message %d seen %d times", id, n)
	}
	for _, id := range initial {
		require.Equal(t, 1, counts[id], "message %d (present at the start) seen %d times", id, counts[id])
	}
	require.True(t, slices.IsSortedFunc(seen, func(a, b int64) int { return int(b - a) }), "newest first")
}

func TestSearch(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t,
		msg{queue: "orders", failType: "PaymentDeclined", failText: "card 4242 declined by issuer", messageID: "pay-7f3a", body: `{"sku":"blue-widget"}`},
		msg{queue: "orders", failType: "TimeoutError", failText: "inventory took 3000ms", messageID: "inv-1", body: `{"sku":"red-gadget"}`,
			headers: amqp.Table{"x-tenant": "tenant-zebra", "nested": amqp.Table{"trace": "trace-abc-123"}}},
		msg{queue: "billing", failType: "TimeoutError", failText: "ledger took 100ms", messageID: "bill-9", body: `{"sku":"blue-widget"}`},
	)
	search := func(token, extra, q string) []int64 {
		return b.listAll(t, "/api/v1/messages?q="+url.QueryEscape(q)+extra, token)
	}
	// Failure text and type, case-insensitive.
	require.Equal(t, []int64{ids[0]}, search(tokAdmin, "", "DECLINED BY"))
	require.Equal(t, []int64{ids[2], ids[1]}, search(tokAdmin, "", "timeouterror"))
	// Message id.
	require.Equal(t, []int64{ids[2]}, search(tokAdmin, "", "bill-9"))
	// Header values, nested too.
	require.Equal(t, []int64{ids[1]}, search(tokAdmin, "", "tenant-zebra"))
	require.Equal(t, []int64{ids[1]}, search(tokAdmin, "", "trace-abc-123"))
	// Words in order, the last one as a prefix.
	require.Equal(t, []int64{ids[0]}, search(tokAdmin, "", "declined by iss"))
	require.Equal(t, []int64{ids[2], ids[1]}, search(tokAdmin, "", "Timeout"))
	require.Empty(t, search(tokAdmin, "", "by declined"))
	// Body phrase: within a source queue.
	require.Equal(t, []int64{ids[0]}, search(tokAdmin, "&source_queue=orders", `"sku":"blue-widget"`))
	require.Equal(t, []int64{ids[2]}, search(tokAdmin, "&source_queue=billing&failed_after="+url.QueryEscape(time.Now().Add(-24*time.Hour).Format(time.RFC3339)), "blue-widget"))
	// Without a queue, the words of text bodies are searched through the
	// text index, across queues (blue-widget is the phrase "blue widget").
	require.Equal(t, []int64{ids[2], ids[0]}, search(tokAdmin, "", "blue-widget"))
	// A viewer without body permission cannot probe bodies by searching,
	// with a queue or without.
	require.Empty(t, search(tokViewer, "&source_queue=orders", "blue-widget"))
	require.Empty(t, search(tokViewer, "", "blue-widget"))
	require.Equal(t, []int64{ids[0]}, search(tokViewerB, "&source_queue=orders", "blue-widget"))
	// A scoped token never finds other queues' messages.
	require.Equal(t, []int64{ids[1]}, search(tokScoped, "", "timeouterror"))
	require.Empty(t, search(tokScoped, "", "bill-9"))
	// Query syntax is not interpreted: these are plain (word-less) text.
	require.Empty(t, search(tokAdmin, "", "%%%"))
	require.Empty(t, search(tokAdmin, "", "a & !b | c:*"))
}

// TestInjectionLookingInputIsHarmless sends SQL-looking values in every
// filter: each is a plain value, matches nothing, and the table survives.
func TestInjectionLookingInputIsHarmless(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many("orders", 3)...)
	evil := []string{
		"'; DROP TABLE dead_messages; --", `" OR 1=1 --`, `orders' OR '1'='1`, `\'; SELECT pg_sleep(5); --`,
		"%' OR source_queue LIKE '%", "orders\x00", "1) UNION SELECT * FROM audit_log --",
	}
	for _, v := range evil {
		for _, p := range []string{"source_queue", "reason", "q"} {
			r := b.do(t, "GET", "/api/v1/messages?status=all&"+p+"="+url.QueryEscape(v), tokAdmin, nil)
			if r.status == http.StatusBadRequest {
				require.Contains(t, r.errMessage(t), p)
				continue
			}
			require.Equal(t, http.StatusOK, r.status, "%s=%q: %s", p, v, r.body)
			var page struct {
				Messages []store.Message `json:"messages"`
			}
			r.json(t, &page)
			require.Empty(t, page.Messages, "%s=%q matched something", p, v)
		}
		for _, p := range []string{"status", "group", "failed_after", "cursor"} {
			r := b.do(t, "GET", "/api/v1/messages?"+p+"="+url.QueryEscape(v), tokAdmin, nil)
			require.Equal(t, http.StatusBadRequest, r.status, "%s=%q", p, v)
		}
		// NUL cannot be in any stored text: refused as a bad parameter.
		want := http.StatusOK
		if strings.ContainsRune(v, 0) {
			want = http.StatusBadRequest
		}
		r := b.do(t, "GET", "/api/v1/groups?source_queue="+url.QueryEscape(v), tokAdmin, nil)
		require.Equal(t, want, r.status)
		// A reason is one of a fixed set: any other is refused, naming it.
		r = b.do(t, "POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"filter": map[string]any{"status": "all", "reason": v}})
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Contains(t, r.errMessage(t), "reason")
		r = b.do(t, "POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"filter": map[string]any{"status": "all", "source_queue": v}})
		require.Equal(t, want, r.status, "%s", r.body)
		if want == http.StatusOK {
			var res store.ActionResult
			r.json(t, &res)
			require.Zero(t, res.Changed)
		}
		r = b.do(t, "GET", "/api/v1/audit?actor="+url.QueryEscape(v), tokAdmin, nil)
		require.Equal(t, want, r.status)
	}
	require.EqualValues(t, 3, b.count(t, `SELECT count(*) FROM dead_messages`))
}

func TestUnknownRoutesAndMethods(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.do(t, "GET", "/api/v1/nothing", tokAdmin, nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", r.errCode(t))
	r = b.do(t, "GET", "/nothing", "", nil)
	require.Equal(t, http.StatusNotFound, r.status)
	require.Equal(t, "not_found", r.errCode(t))
	r = b.do(t, "PUT", "/api/v1/stats", tokAdmin, nil)
	require.Equal(t, http.StatusMethodNotAllowed, r.status)
	require.Equal(t, "method_not_allowed", r.errCode(t))
	require.Contains(t, r.header.Get("Allow"), "GET")
	// The client's request id is echoed.
	req, err := http.NewRequest("GET", b.srv.URL+"/api/v1/nothing", nil)
	require.NoError(t, err)
	req.Header.Set("X-Request-Id", "my-request-1")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, "my-request-1", resp.Header.Get("X-Request-Id"))
}

// TestSearchSharedKeyPages: a header value thousands of messages share
// takes the walking plan; paging through it returns each exactly once.
func TestSearchSharedKeyPages(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ms := many("orders", 1100)
	for i := range ms {
		ms[i].headers = amqp.Table{"tenant": "acme-corp"}
		if i%100 == 0 {
			ms[i].headers = amqp.Table{"tenant": "other"}
		}
	}
	ids := b.seed(t, ms...)
	var want []int64
	for i, id := range ids {
		if i%100 != 0 {
			want = append(want, id)
		}
	}
	slices.Reverse(want)
	require.Equal(t, want, b.listAll(t, "/api/v1/messages?limit=200&q=ACME-corp", tokAdmin))
	require.Equal(t, want[:50], b.listAll(t, "/api/v1/messages?limit=1000&q=acme-corp&failed_after="+
		url.QueryEscape(time.Now().Add(-time.Hour).Format(time.RFC3339)), tokAdmin)[:50])
	require.Len(t, b.listAll(t, "/api/v1/messages?q=other", tokAdmin), 11)
}
