package consumer_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// unansweringStore commits the first batch but reports an error, as when
// the connection dies during COMMIT, and then cannot say whether it did
// for a few questions, as while the server restarts or fails over.
type unansweringStore struct {
	*store.Store
	mu        sync.Mutex
	lost      bool
	unanswers int
	asked     int
	// settled counts what came after the lost answer: writes of the batch
	// again, and answered questions.
	settled int
}

func (u *unansweringStore) IngestBatch(ctx context.Context, b store.IngestBatch) (store.IngestResult, error) {
	res, err := u.Store.IngestBatch(ctx, b)
	u.mu.Lock()
	defer u.mu.Unlock()
	if err == nil && !u.lost {
		u.lost = true
		return store.IngestResult{}, errors.New("test: connection lost during COMMIT")
	}
	u.settled++
	return res, err
}

func (u *unansweringStore) CommittedRows(ctx context.Context, id int64) (int, bool, error) {
	u.mu.Lock()
	u.asked++
	unanswered := u.asked <= u.unanswers
	u.mu.Unlock()
	if unanswered {
		return 0, false, errors.New("test: database unreachable")
	}
	rows, ok, err := u.Store.CommittedRows(ctx, id)
	u.mu.Lock()
	u.settled++
	u.mu.Unlock()
	return rows, ok, err
}

// A batch whose commit's outcome is unknown is not written again until
// the store answers whether it committed (ARCHITECTURE.md, ingest rule
// 4): here it did, so its messages are stored once. Found by the
// PostgreSQL failover test, where the standby received a commit whose
// answer never reached dlq.
func TestUnknownCommitIsResolvedBeforeWritingAgain(t *testing.T) {
	t.Parallel()
	st, db, _, ch, exchange, queue := ownPipelineFixture(t)
	u := &unansweringStore{Store: st, unanswers: 3}
	p := startPipeline(t, u, exchange, queue, 20, 40, 20*time.Millisecond)
	// Published once the consumer is ready: while it resolves the lost
	// commit it is not ready, and published before, the batch could
	// fill and fail before startPipeline saw it ready.
	publishDead(t, ch, exchange, "unknown", 20)
	rows := func() int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages`).Scan(&n))
		return n
	}
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.settled > 0
	}, "the lost commit was never settled")
	p.stop() // commits and acknowledges whatever it holds
	require.Equal(t, 20, rows(), "every dead letter stored once")
	u.mu.Lock()
	require.Greater(t, u.asked, u.unanswers, "asked until answered")
	u.mu.Unlock()
}

// A consumer that could not reach PostgreSQL while it asked whether its
// batch committed is ready again once the answer comes (yes): nothing
// else has to arrive first. It stayed unready (/readyz 503, dlq_up 0)
// until its next batch, which on a quiet dead-letter queue may never come.
func TestReadyAgainWhenTheLostCommitIsFound(t *testing.T) {
	t.Parallel()
	st, db, _, ch, exchange, queue := ownPipelineFixture(t)
	// Queued before the consumer starts, so that they make one full batch:
	// after it nothing more is written that could clear the failure.
	publishDead(t, ch, exchange, "ready", 20)
	u := &unansweringStore{Store: st, unanswers: 3}
	p := startPipeline(t, u, exchange, queue, 20, 40, time.Hour)
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		u.mu.Lock()
		defer u.mu.Unlock()
		return u.settled > 0
	}, "the lost commit was never settled")
	dlqtest.Eventually(t, 10*time.Second, func() bool { return p.ready() == nil },
		"still unready after its batch was found committed: %v", p.ready())
	var n int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages`).Scan(&n))
	require.Equal(t, 20, n, "every dead letter stored once")
	u.mu.Lock()
	require.Greater(t, u.asked, u.unanswers, "asked until answered")
	require.Equal(t, 1, u.settled, "one batch, answered by the question, never written again")
	u.mu.Unlock()
}
