package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// Bodies of every shape a field filter meets, by name.
var fieldBodies = []struct{ name, body string }{
	{"gold", `{"customer":{"tier":"gold","id":7},"order":{"id":42,"total":99.5},"items":[{"sku":"A1","qty":2},{"sku":"B2","qty":1}],"tags":["red","blue"],"paid":true,"note":null}`},
	{"silver", `{"customer":{"tier":"silver","id":8},"order":{"id":"42","total":150},"items":[{"sku":"B2","qty":5}],"tags":"red","paid":false}`},
	{"array", ` [{"customer":{"tier":"gold"}}]`},
	{"text", `customer.tier=gold`},
	{"binary", "\xff\xfe{\"customer\":{\"tier\":\"gold\"}}"},
	{"truncated", `{"customer":{"tier":"gold"}`},
	{"no tier", `{"customer":{}}`},
	{"scalar", `"gold"`},
}

// seedBodies stores one message per body in queue and returns the names by
// id.
func seedBodies(t *testing.T, st *store.Store, db *pgxpool.Pool, queue string) map[int64]string {
	t.Helper()
	msgs := make([]store.NewMessage, len(fieldBodies))
	for i, b := range fieldBodies {
		msgs[i] = msg(queue, b.body, int64(i+1))
	}
	ingest(t, st, msgs...)
	ids := messageIDs(t, db, "source_queue = $1", queue)
	require.Len(t, ids, len(fieldBodies))
	out := map[int64]string{}
	for i, id := range ids {
		out[id] = fieldBodies[i].name
	}
	return out
}

// Field filters over nested objects, arrays, types, missing paths and
// bodies that are not JSON, in listings, counts and bulk actions alike.
func TestFieldFilters(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	names := seedBodies(t, st, db, "orders")
	match := func(fields ...string) []string {
		t.Helper()
		f := store.Filter{SourceQueue: "orders", Fields: fields}
		page, err := st.ListMessages(ctx, f, store.ListOptions{Limit: 100})
		require.NoError(t, err, "%v", fields)
		var got []string
		for _, m := range page.Messages {
			got = append(got, names[m.ID])
		}
		slices.Sort(got)
		total, err := st.CountMessages(ctx, f, store.CountOptions{})
		require.NoError(t, err)
		require.Equal(t, store.Total{Value: int64(len(got)), Exact: true}, total, "%v: the count agrees with the listing", fields)
		return got
	}
	for _, c := range []struct {
		fields []string
		want   []string
	}{
		{[]string{"customer.tier=gold"}, []string{"array", "gold"}},
		{[]string{`customer.tier="gold"`}, []string{"array", "gold"}},
		{[]string{"customer.tier!=gold"}, []string{"silver"}},
		{[]string{"customer.tier!=platinum"}, []string{"array", "gold", "silver"}},
		{[]string{"order.id=42"}, []string{"gold"}},
		{[]string{`order.id="42"`}, []string{"silver"}},
		{[]string{"order.id!=42"}, []string{"silver"}},
		{[]string{"order.total>100"}, []string{"silver"}},
		{[]string{"order.total<=99.5"}, []string{"gold"}},
		{[]string{"order.total>=99.50"}, []string{"gold", "silver"}},
		{[]string{"customer.tier>h"}, []string{"silver"}},
		{[]string{"items.sku=B2"}, []string{"gold", "silver"}},
		{[]string{"items.0.sku=B2"}, []string{"silver"}},
		{[]string{"items.1.sku=B2"}, []string{"gold"}},
		{[]string{"items.2.sku?"}, nil},
		{[]string{"items.qty>4"}, []string{"silver"}},
		{[]string{"tags=red"}, []string{"gold", "silver"}},
		{[]string{"tags!=red"}, nil},
		{[]string{"tags!=green"}, []string{"gold", "silver"}},
		{[]string{"paid=true"}, []string{"gold"}},
		{[]string{"paid=false"}, []string{"silver"}},
		{[]string{`paid="true"`}, nil},
		{[]string{"note?"}, []string{"gold"}},
		{[]string{"note=null"}, []string{"gold"}},
		{[]string{"customer.tier?"}, []string{"array", "gold", "silver"}},
		{[]string{"customer?"}, []string{"array", "gold", "no tier", "silver"}},
		{[]string{"customer.missing?"}, nil},
		{[]string{"customer.tier.deeper=1"}, nil},
		{[]string{"customer.tier=gold", "items.sku=A1"}, []string{"gold"}},
		{[]string{"customer.tier=gold", "items.sku=C3"}, nil},
	} {
		require.Equal(t, c.want, match(c.fields...), "%v", c.fields)
	}

	// They combine with the other filters, the search among them.
	past := time.Now().Add(time.Hour)
	page, err := st.ListMessages(ctx, store.Filter{SourceQueue: "orders", FailedAfter: &past, Fields: []string{"customer?"}}, store.ListOptions{})
	require.NoError(t, err)
	require.Empty(t, page.Messages)
	page, err = st.ListMessages(ctx, store.Filter{Status: "all", Query: `"tier"`, SourceQueue: "orders", Fields: []string{"paid=false"}}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	require.Equal(t, "silver", names[page.Messages[0].ID])

	// A bulk action selects the same messages.
	res, err := st.Acknowledge(ctx, store.Filter{SourceQueue: "orders", Fields: []string{"customer.tier=gold"}}, store.Actor{Name: "t"}, store.ActionOptions{})
	require.NoError(t, err)
	require.EqualValues(t, 2, res.Changed)
	require.Equal(t, 2, count(t, db, "status = 'acknowledged'"))

	_, err = st.ListMessages(ctx, store.Filter{SourceQueue: "orders", Fields: []string{"customer..tier=gold"}}, store.ListOptions{})
	require.ErrorIs(t, err, store.ErrInvalidFilter)
	require.ErrorContains(t, err, "empty path segment")
}

// A count that a field filter makes slow runs out of its budget and
// answers an estimate, never a count of everything.
func TestCountFieldsPastBudget(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	const n = 20_000
	msgs := make([]store.NewMessage, 0, 2000)
	for i := range n {
		msgs = append(msgs, msg("orders", fmt.Sprintf(`{"order":{"id":%d,"lines":[{"sku":"s-%d"},{"sku":"x"}]},"pad":"%0200d"}`, i, i%10, i), int64(i+1)))
		if len(msgs) == cap(msgs) {
			ingest(t, st, msgs...)
			msgs = msgs[:0]
		}
	}
	f := store.Filter{SourceQueue: "orders", Fields: []string{"order.lines.sku=s-3"}}
	got, err := st.CountMessages(ctx, f, store.CountOptions{Budget: time.Millisecond})
	require.NoError(t, err)
	require.False(t, got.Exact, "20,000 bodies are not parsed in a millisecond: %+v", got)
	require.LessOrEqual(t, got.Value, int64(n), "at most the queue's pending messages")

	got, err = st.CountMessages(ctx, f, store.CountOptions{Budget: time.Minute})
	require.NoError(t, err)
	require.Equal(t, store.Total{Value: n / 10, Exact: true}, got, "with time enough, the count is exact")
}
