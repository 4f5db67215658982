package store_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// manyHeaders is dead message i with 20 string headers, h00 to h19, more
// than the 16 search keys a message keeps, and a failure with a number.
func manyHeaders(i int) *amqp.Delivery {
	h := amqp.Table{
		"x-death":          []any{amqp.Table{"queue": "orders", "reason": "rejected", "count": int64(1), "time": time.Now().UTC().Truncate(time.Second)}},
		"x-exception-type": "TimeoutError",
		"x-error-message":  "upstream took 1500ms",
	}
	for k := range 20 {
		h[fmt.Sprintf("h%02d", k)] = fmt.Sprintf("hv-%02d", k)
	}
	return &amqp.Delivery{MessageId: fmt.Sprintf("mid-%d", i), CorrelationId: "cid-1", Headers: h, Body: []byte(`{}`)}
}

// TestSearchKeysChosenInOrder: a message with more values than it keeps
// as search keys keeps its ids, then its failure's values, then header
// values in the order of their keys: the same ones in every message, and
// whichever way ingest read the headers (the converter lists them in map
// order).
func TestSearchKeysChosenInOrder(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, dsn := dlqtest.Store(t)
	var msgs []store.NewMessage
	for i := range 8 {
		m := consumer.Convert(manyHeaders(i), "dlq", time.Now().UTC())
		m.Fingerprint = int64(i + 1)
		msgs = append(msgs, m)
	}
	ingest(t, st, msgs...)

	want := func(i int) []string {
		keys := []string{fmt.Sprintf("mid-%d", i), "cid-1", "1500ms"}
		for k := range 13 {
			keys = append(keys, fmt.Sprintf("hv-%02d", k))
		}
		return keys
	}
	rows, err := dlqtest.DB(t, dsn).Query(ctx, `SELECT search_keys FROM dead_messages ORDER BY id`)
	require.NoError(t, err)
	stored, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
	require.NoError(t, err)
	require.Len(t, stored, 8)
	for i, keys := range stored {
		require.Equal(t, want(i), keys, "message %d", i)
	}

	for _, q := range []string{"1500ms", "cid-1", "hv-00", "hv-12"} {
		page, err := st.ListMessages(ctx, store.Filter{Query: q}, store.ListOptions{Limit: 20})
		require.NoError(t, err)
		require.Len(t, page.Messages, 8, "q=%q finds every message", q)
	}

	// The choice does not depend on the order the values come in.
	m := consumer.Convert(manyHeaders(0), "dlq", time.Now().UTC())
	for range 20 {
		rand.Shuffle(len(m.HeaderValues), func(a, b int) { m.HeaderValues[a], m.HeaderValues[b] = m.HeaderValues[b], m.HeaderValues[a] })
		require.Equal(t, want(0), store.SearchKeys(&m))
	}
	m.HeaderValues = nil // as import and rekey read them: from the headers' JSON
	require.Equal(t, want(0), store.SearchKeys(&m))
}
