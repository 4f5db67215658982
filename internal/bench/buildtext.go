package bench

import (
	"context"
	"fmt"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dlq/dlq/store"
)

// buildTextChunk is how many ids one INSERT ... SELECT of -build-text
// covers: small enough that the workers share the work evenly and a
// failed chunk costs little.
const buildTextChunk = 200_000

// buildText writes the text search documents (message_text) of every
// plain row of an existing schema in bulk, as -build-text asks: migrate
// (migration 00079 creates message_text and queues every stored row for
// the indexer), drop the documents' GIN index, INSERT ... SELECT by id
// ranges on o.buildTextWorkers connections, build the index once, empty
// the indexer's queue, ANALYZE. Each step prints its time. Rows that
// already have a document keep it, so a build cut short can be rerun.
func buildText(ctx context.Context, o apiOptions, dsn string) error {
	workers := max(o.buildTextWorkers, 1)
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: int32(workers + 1), TextSearch: true})
	if err != nil {
		return err
	}
	defer st.Close()
	step := func(name string, fn func() error) error {
		start := time.Now()
		if err := fn(); err != nil {
			return fmt.Errorf("build text: %s: %w", name, err)
		}
		fmt.Printf("build text: %-40s %s\n", name, time.Since(start).Round(100*time.Millisecond))
		return nil
	}
	total := time.Now()
	if err := step("migrate", func() error { _, err := st.Migrate(ctx, nil); return err }); err != nil {
		return err
	}
	sb := st.Bench()
	if err := step("drop message_text_document", func() error { return sb.DropTextDocumentIndex(ctx) }); err != nil {
		return err
	}
	lo, hi, err := sb.MessageIDRange(ctx)
	if err != nil {
		return err
	}
	var written int64
	err = step(fmt.Sprintf("documents of ids %d-%d (%d workers)", lo, hi-1, workers), func() error {
		next := make(chan int64)
		eg, gctx := errgroup.WithContext(ctx)
		eg.Go(func() error {
			defer close(next)
			for from := lo; from < hi; from += buildTextChunk {
				select {
				case next <- from:
				case <-gctx.Done():
					return gctx.Err()
				}
			}
			return nil
		})
		counts := make([]int64, workers)
		for w := range workers {
			eg.Go(func() error {
				for from := range next {
					n, err := sb.BuildTextDocuments(gctx, from, min(from+buildTextChunk, hi))
					if err != nil {
						return err
					}
					counts[w] += n
				}
				return nil
			})
		}
		err := eg.Wait()
		for _, n := range counts {
			written += n
		}
		return err
	})
	if err != nil {
		return err
	}
	fmt.Printf("build text: %d documents written\n", written)
	steps := []struct {
		name string
		fn   func(store.Bench) error
	}{
		{"build message_text_document (GIN)", func(b store.Bench) error { return b.CreateTextDocumentIndex(ctx) }},
		{"empty text_index_queue", func(b store.Bench) error { return b.ClearTextQueue(ctx) }},
		{"ANALYZE message_text", func(b store.Bench) error { return b.Analyze(ctx, "message_text") }},
	}
	for _, s := range steps {
		if err := step(s.name, func() error { return sb.Maintenance(ctx, s.fn) }); err != nil {
			return err
		}
	}
	table, index, err := sb.TextDocumentsSize(ctx)
	if err != nil {
		return err
	}
	fmt.Printf("build text: done in %s; message_text %s, message_text_document %s\n", time.Since(total).Round(time.Second), table, index)
	return nil
}
