package textindex_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
	"github.com/dlq/dlq/textindex"
)

// TestIndexerRun: the indexer drains the queue in the background (no new
// entries after the first batches: it catches up without pausing), counts
// what it did, and Run returns nil once its context ends.
func TestIndexerRun(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	ctx := context.Background()
	const batches, per = 5, 100
	now := time.Now().UTC()
	for b := range batches {
		msgs := make([]store.NewMessage, per)
		for i := range msgs {
			msgs[i] = store.NewMessage{SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
				Properties: json.RawMessage(`{"content_type":"text/plain"}`), Headers: json.RawMessage(`{}`),
				Body: fmt.Appendf(nil, "lychee number %d", b*per+i), FirstFailedAt: now, FailedAt: now,
				Fingerprint: int64(b*per + i + 1), Returns: store.ReturnsUnknown}
		}
		_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
		require.NoError(t, err)
	}
	reg := prometheus.NewRegistry()
	// Small batches, so that it takes several.
	ix, err := textindex.New(textindex.Config{Store: st, Batch: 64, Poll: 10 * time.Millisecond, Registerer: reg})
	require.NoError(t, err)
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ix.Run(rctx) }()
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		n, err := st.TextWaiting(ctx)
		return err == nil && n == 0
	}, "the indexer never emptied the queue")
	cancel()
	require.NoError(t, <-done)
	docs, err := testutil.GatherAndCount(reg, "dlq_text_index_documents_total")
	require.NoError(t, err)
	require.Equal(t, 1, docs)
	require.InDelta(t, batches*per, gauge(t, reg, "dlq_text_index_documents_total"), 0)
	require.InDelta(t, batches*per, gauge(t, reg, "dlq_text_index_rows_total"), 0)
	require.InDelta(t, 0, gauge(t, reg, "dlq_text_index_errors_total"), 0)
	cpu, err := testutil.GatherAndCount(reg, "dlq_text_index_database_cpu_seconds_total")
	require.NoError(t, err)
	require.Equal(t, 1, cpu, "the database's CPU for the batches is exported")
	page, err := st.ListMessages(ctx, store.Filter{Query: "lychee number 123"}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
}

func gauge(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() == name {
			m := mf.GetMetric()[0]
			if c := m.GetCounter(); c != nil {
				return c.GetValue()
			}
			return m.GetGauge().GetValue()
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// TestNewChecksConfig: a duty outside 1-100 or no store is refused.
func TestNewChecksConfig(t *testing.T) {
	t.Parallel()
	_, err := textindex.New(textindex.Config{})
	require.ErrorContains(t, err, "Store is required")
	st, _ := dlqtest.Store(t)
	_, err = textindex.New(textindex.Config{Store: st, Duty: 101})
	require.ErrorContains(t, err, "duty 101")
}

// TestIndexerYieldsToReplay: while a replay task runs, the indexer keeps
// to its duty cycle even with nothing new arriving, leaving the replay the
// machine; once the replay has finished it catches up without pausing.
// At 1% duty a batch of one row is followed by a pause 99 times as long,
// so a second of work indexes a few rows, not the 40 waiting (unpaced it
// takes them all well within it).
func TestIndexerYieldsToReplay(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	now := time.Now().UTC()
	msgs := make([]store.NewMessage, 40)
	for i := range msgs {
		msgs[i] = store.NewMessage{SourceQueue: "orders", DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
			Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`), Body: fmt.Appendf(nil, "papaya %d", i),
			FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1), Returns: store.ReturnsUnknown}
	}
	_, err := st.IngestBatch(ctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: msgs})
	require.NoError(t, err)
	task, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{SourceQueue: "orders"},
		MaxItems: 100, Request: json.RawMessage(`{}`), Actor: store.Actor{Name: "test", Role: "operator", Via: "test"}})
	require.NoError(t, err)
	_, err = db.Exec(ctx, `UPDATE replay_tasks SET status = 'running' WHERE id = $1`, task.ID)
	require.NoError(t, err)

	reg := prometheus.NewRegistry()
	ix, err := textindex.New(textindex.Config{Store: st, Batch: 1, Duty: 1, Poll: 10 * time.Millisecond, Registerer: reg})
	require.NoError(t, err)
	// A second of work while the replay runs.
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	require.NoError(t, ix.Run(rctx))
	cancel()
	during := gauge(t, reg, "dlq_text_index_rows_total")
	require.Positive(t, during, "it still works, at its duty")
	require.Less(t, during, 20.0, "paced while the replay runs")

	_, err = db.Exec(ctx, `UPDATE replay_tasks SET status = 'completed' WHERE id = $1`, task.ID)
	require.NoError(t, err)
	rctx, cancel = context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- ix.Run(rctx) }()
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		n, err := st.TextWaiting(ctx)
		return err == nil && n == 0
	}, "the indexer never caught up after the replay")
	cancel()
	require.NoError(t, <-done)
}
