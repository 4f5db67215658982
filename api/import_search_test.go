package api_test

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/store"
)

// An imported message has the search keys ingest gave it in the dlq it
// came from: its message id, its correlation id (a property, not in the
// export's headers), its failure's values and its header values, the same
// ones, so every q that finds it there finds it here.
func TestImportedMessageSearchKeys(t *testing.T) {
	t.Parallel()
	src, dst := setup(t), setup(t)
	batch := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for i, extra := range []int{2, 20} { // few headers, and more than the keys a message keeps
		h := amqp.Table{
			"x-death":          []any{amqp.Table{"queue": "orders", "reason": "rejected", "count": int64(1), "time": time.Now().UTC().Truncate(time.Second)}},
			"x-exception-type": "TimeoutError",
			"x-error-message":  fmt.Sprintf("order 'SKU-%d' took 1500ms", i),
			"tenant":           "acme-42",
			"attempt":          int32(981),
		}
		for k := range extra {
			h[fmt.Sprintf("h%02d", k)] = fmt.Sprintf("hv-%d-%02d", i, k)
		}
		d := &amqp.Delivery{MessageId: fmt.Sprintf("mid-%d", i), CorrelationId: fmt.Sprintf("corr-%d", i),
			ContentType: "application/json", Headers: h, Body: []byte(`{"n":1}`)}
		m := consumer.Convert(d, "dlq", time.Now().UTC())
		m.Fingerprint = int64(i + 1)
		batch.Messages = append(batch.Messages, m)
	}
	_, err := src.st.IngestBatch(context.Background(), batch)
	require.NoError(t, err)

	lines := src.exportLines(t, "", tokAdmin)
	require.Len(t, lines, 3)
	require.Equal(t, importAnswer{Imported: 2}, dst.importLines(t, joinLines(lines), tokAdmin).imported(t))

	keys := func(b *bundle) [][]string {
		rows, err := b.db.Query(context.Background(), `SELECT search_keys FROM dead_messages ORDER BY message_id`)
		require.NoError(t, err)
		out, err := pgx.CollectRows(rows, pgx.RowTo[[]string])
		require.NoError(t, err)
		return out
	}
	want, got := keys(src), keys(dst)
	require.Contains(t, want[0], "corr-0")
	require.Len(t, want[1], 16, "more values than keys: the choice decides")
	require.Len(t, got, len(want))
	for i := range want {
		require.ElementsMatch(t, want[i], got[i], "the imported message's keys are the original's")
	}

	for _, q := range []string{"corr-0", "corr-1", "mid-1", "sku-1", "acme-42", "981", "hv-0-01"} {
		for _, b := range []*bundle{src, dst} {
			r := b.do(t, "GET", "/api/v1/messages?q="+url.QueryEscape(q), tokViewer, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			var page struct{ Messages []store.Message }
			r.json(t, &page)
			require.NotEmpty(t, page.Messages, "q=%q", q)
		}
	}
}
