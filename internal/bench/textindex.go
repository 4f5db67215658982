package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/store"
	"github.com/dlq/dlq/textindex"
)

// indexerRun is the text indexer of an ingest-cost run: a store of its
// own (one connection, its backend named schema_ix: the run's DSN ends
// in its application_name), running textindex.Indexer at the given duty
// (dlq serve's default unless -text-index-duty says otherwise).
type indexerRun struct {
	st     *store.Store
	pids   []int
	cpu0   time.Duration
	cancel context.CancelFunc
	done   chan struct{}
}

func startIndexer(ctx context.Context, admin *store.BenchAdmin, dsn, schema string, duty int) (*indexerRun, error) {
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn + "_ix", MaxConns: 1, TextSearch: true})
	if err != nil {
		return nil, err
	}
	ix, err := textindex.New(textindex.Config{Store: st, Duty: duty})
	if err != nil {
		st.Close()
		return nil, err
	}
	st.Bench().OpenConnections(ctx, 1)
	pids, err := admin.BackendPIDs(ctx, schema+"_ix")
	if err != nil {
		st.Close()
		return nil, err
	}
	r := &indexerRun{st: st, pids: pids, cpu0: backendsCPU(pids), done: make(chan struct{})}
	rctx, cancel := context.WithCancel(ctx)
	r.cancel = cancel
	go func() { defer close(r.done); _ = ix.Run(rctx) }()
	return r, nil
}

// catchUp notes how many rows the indexer did during the burst, then
// waits until no row waits for a document and notes how long that took.
func (r *indexerRun) catchUp(ctx context.Context, st *store.Store, run *costRun, n int) error {
	start := time.Now()
	left, err := st.TextWaiting(ctx)
	if err != nil {
		return err
	}
	run.left, run.indexedDuring = int(left), n-int(left)
	deadline := start.Add(30 * time.Minute)
	for left > 0 {
		if time.Now().After(deadline) {
			return fmt.Errorf("text indexer: %d rows still waiting after 30 minutes", left)
		}
		time.Sleep(20 * time.Millisecond) // polling a benchmark's progress, not waiting for an effect in a test
		if left, err = st.TextWaiting(ctx); err != nil {
			return err
		}
	}
	run.catchUp = time.Since(start)
	return nil
}

func (r *indexerRun) cpu() time.Duration { return backendsCPU(r.pids) - r.cpu0 }

func (r *indexerRun) stop() {
	r.cancel()
	<-r.done
	r.st.Close()
}

// indexExpired readies a cleanup run's store as dlq serve runs with text
// search on: the expired rows get their documents, so that deleting one
// deletes its document too (ON DELETE CASCADE), as in a store that
// indexed them; then a text indexer runs beside ingest until stop.
func indexExpired(ctx context.Context, st *store.Store) (stop func(), err error) {
	t := time.Now()
	sb := st.Bench()
	lo, hi, err := sb.MessageIDRange(ctx)
	if err != nil {
		return nil, err
	}
	n, err := sb.BuildTextDocuments(ctx, lo, hi)
	if err != nil {
		return nil, err
	}
	if err := sb.ClearTextQueue(ctx); err != nil {
		return nil, err
	}
	fmt.Printf("wrote the documents of %d expired messages in %s\n", n, time.Since(t).Round(time.Second))
	ix, err := textindex.New(textindex.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	if err != nil {
		return nil, err
	}
	ixCtx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); _ = ix.Run(ixCtx) }()
	return func() { cancel(); <-done }, nil
}
