package cron

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// Idle keep-alive connections of the notifiers' HTTP clients.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	)
}

func ctxT(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func quietLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(io.Discard, nil))
}

// testLogger logs to the test's output at warn and above, which is where
// the cron jobs report anything surprising.
func testLogger(t testing.TB) *slog.Logger {
	return slog.New(slog.NewTextHandler(tWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

type tWriter struct{ t testing.TB }

func (w tWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimRight(string(p), "\n"))
	return len(p), nil
}

// ingest stores n pending messages of queue, each body bodySize bytes, and
// returns their ids.
func ingest(t testing.TB, st *store.Store, db *pgxpool.Pool, queue string, n, bodySize int) []int64 {
	t.Helper()
	ctx := ctxT(t)
	b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	now := time.Now()
	for i := range n {
		b.Messages = append(b.Messages, store.NewMessage{
			SourceQueue: queue, DeadLetterQueue: "dlq", Reason: "rejected", DeathCount: 1,
			FailureType: "TimeoutError", FailureMessage: fmt.Sprintf("upstream took %d ms", i),
			Properties: json.RawMessage(`{}`), Headers: json.RawMessage(`{}`),
			Body: []byte(strings.Repeat("x", bodySize)), FirstFailedAt: now, FailedAt: now,
			Fingerprint: int64(i),
		})
	}
	_, err := st.IngestBatch(ctx, b)
	require.NoError(t, err)
	var ids []int64
	rows, err := db.Query(ctx, `SELECT id FROM dead_messages WHERE ingest_batch = $1 ORDER BY id`, b.ID)
	require.NoError(t, err)
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.NoError(t, st.ConfirmBatches(ctx, []int64{b.ID}))
	require.Len(t, ids, n)
	return ids
}

// ackIDs acknowledges ids through the store's own bulk action.
func ackIDs(t testing.TB, st *store.Store, ids []int64) {
	t.Helper()
	if len(ids) == 0 {
		return
	}
	_, err := st.Acknowledge(ctxT(t), store.Filter{IDs: ids}, store.Actor{Name: "test", Via: "api"}, store.ActionOptions{})
	require.NoError(t, err)
}

// deleteIDs deletes ids through the store's own bulk action.
func deleteIDs(t testing.TB, st *store.Store, ids []int64) {
	t.Helper()
	if len(ids) == 0 {
		return
	}
	_, err := st.Delete(ctxT(t), store.Filter{IDs: ids}, store.Actor{Name: "test", Via: "api"}, store.ActionOptions{})
	require.NoError(t, err)
}

// replayIDs runs ids through the replay feature's store path: a task, a
// claim (pending -> replaying), and settled outcomes. published ones become
// replayed, the others go back to pending; with leave, the claimed rows stay
// replaying.
func replayIDs(t testing.TB, st *store.Store, ids []int64, result string, leave bool) {
	t.Helper()
	if len(ids) == 0 {
		return
	}
	ctx := ctxT(t)
	task, err := st.CreateReplayTask(ctx, store.NewReplayTask{
		Selection: store.Filter{IDs: ids}, MaxItems: int64(len(ids)) + 1,
		Request: json.RawMessage(`{}`), Actor: store.Actor{Name: "test", Via: "api"},
	})
	require.NoError(t, err)
	token := fmt.Sprintf("tok-%d", task.ID)
	claim, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{
		TaskID: task.ID, Token: token, Lease: time.Minute, Limit: len(ids) + 1, MaxReplays: 1000,
	})
	require.NoError(t, err)
	if leave {
		return
	}
	var outs []store.ReplayOutcome
	for _, m := range claim.Messages {
		outs = append(outs, store.ReplayOutcome{ID: m.ID, Token: token, Result: result, Error: "test"})
	}
	_, err = st.SettleReplayOutcomes(ctx, task.ID, outs, false)
	require.NoError(t, err)
}

// backdate moves the resolution time (replayed_at or acknowledged_at) of
// ids into the past. It changes no status, so no counter moves.
func backdate(t testing.TB, db *pgxpool.Pool, ids []int64, age time.Duration) {
	t.Helper()
	_, err := db.Exec(ctxT(t), `
UPDATE dead_messages SET
    replayed_at = CASE WHEN status = 'replayed' THEN now() - $2 * interval '1 second' ELSE replayed_at END,
    acknowledged_at = CASE WHEN status = 'acknowledged' THEN now() - $2 * interval '1 second' ELSE acknowledged_at END
WHERE id = ANY($1)`, ids, age.Seconds())
	require.NoError(t, err)
}

type qs struct{ queue, status string }

// trueCounts counts dead_messages by queue and status (the full GROUP BY
// that production code never runs).
func trueCounts(t testing.TB, db *pgxpool.Pool) map[qs]store.StatusCount {
	t.Helper()
	rows, err := db.Query(ctxT(t), `
SELECT source_queue, status, count(*), coalesce(sum(body_size), 0)::bigint FROM dead_messages GROUP BY 1, 2`)
	require.NoError(t, err)
	out := map[qs]store.StatusCount{}
	for rows.Next() {
		var k qs
		var c store.StatusCount
		require.NoError(t, rows.Scan(&k.queue, &k.status, &c.Messages, &c.Bytes))
		out[k] = c
	}
	require.NoError(t, rows.Err())
	return out
}

// summaryCounts reads queue_summary, leaving out zero rows.
func summaryCounts(t testing.TB, db *pgxpool.Pool) map[qs]store.StatusCount {
	t.Helper()
	rows, err := db.Query(ctxT(t), `SELECT source_queue, status, messages, bytes FROM queue_summary`)
	require.NoError(t, err)
	out := map[qs]store.StatusCount{}
	for rows.Next() {
		var k qs
		var c store.StatusCount
		require.NoError(t, rows.Scan(&k.queue, &k.status, &c.Messages, &c.Bytes))
		if c != (store.StatusCount{}) {
			out[k] = c
		}
	}
	require.NoError(t, rows.Err())
	return out
}

func countWhere(t testing.TB, db *pgxpool.Pool, q string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, db.QueryRow(ctxT(t), q, args...).Scan(&n))
	return n
}

// metricValue returns the value of the series name{labels} in reg, 0 when
// absent.
func metricValue(t testing.TB, reg prometheus.Gatherer, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	next:
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, lp := range m.GetLabel() {
				got[lp.GetName()] = lp.GetValue()
			}
			for k, v := range labels {
				if got[k] != v {
					continue next
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Histogram != nil:
		return float64(m.Histogram.GetSampleCount())
	}
	return 0
}

var _ = dlqtest.Eventually
