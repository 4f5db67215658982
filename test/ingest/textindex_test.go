package ingest

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestServeIndexesText: `dlq serve` with its defaults (text search on)
// ingests dead letters through RabbitMQ and its text indexer writes their
// documents in the background: every plain row gets one, the mark
// passes them all and the queue stays empty, the metrics count them, q finds the failure message's words
// as a phrase across queues, and the binary bodies' bytes never become
// words. A graceful stop stops the indexer too.
func TestServeIndexesText(t *testing.T) {
	t.Parallel()
	h := newHarness(t)
	p := h.start()
	h.waitReady(p, 60*time.Second)
	const n = 40
	pub := h.publish(context.Background(), n, 0, viaDirect)
	pub.Wait(t, 60*time.Second)
	h.waitDrained(60 * time.Second)

	indexed := func() (docs, waiting int) {
		h.query(func(ctx context.Context) error {
			return h.db.QueryRow(ctx, `SELECT (SELECT count(*) FROM message_text),
    (SELECT count(*) FROM dead_messages WHERE id > (SELECT last_id FROM text_index_mark)) +
    (SELECT coalesce(sum(coalesce(cardinality(ids), hi - lo)), 0) FROM text_index_queue)`).Scan(&docs, &waiting)
		})
		return docs, waiting
	}
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		docs, waiting := indexed()
		return docs == n && waiting == 0
	}, "the indexer of dlq serve never wrote every document")
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		v, err := h.metric("dlq_text_index_documents_total")
		return err == nil && v == n
	}, "dlq_text_index_documents_total never reached %d", n)

	// The failure message ("order <id> failed validation") as a phrase,
	// across every queue; the binary bodies (application/octet-stream,
	// one long run of letters after the id) are never tokenised.
	id := pub.ID(7)
	page, err := h.st.ListMessages(context.Background(), store.Filter{Status: "all", Query: "order " + id + " failed"}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	var phrase, long int
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(*) FROM message_text WHERE document @@ phraseto_tsquery('simple', 'failed validation')`).Scan(&phrase)
	})
	require.Equal(t, n, phrase, "every document holds the failure message's words")
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(*) FROM message_text t, unnest(t.document) u WHERE length(u.lexeme) > 100`).Scan(&long)
	})
	require.Zero(t, long, "no word of a binary body")
	h.stopGracefully(p)
}
