package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dlq/dlq/store"
)

// ingestVariant is one side of an ingest-cost comparison.
type ingestVariant struct {
	name string
	drop []string
	// pendingOnly adds the index of pending messages by queue and time
	// that status and alerts read without body search.
	pendingOnly bool
	// textOff writes with text search off (nothing marked, nothing
	// queued for the text indexer).
	textOff bool
	// indexer runs the text indexer (package textindex) at its default
	// pacing beside the writers, as dlq serve does, and waits for it to
	// catch up after the burst.
	indexer bool
}

// measureIngestCost writes the same messages with IngestBatch (two writers,
// batches of 500, dlq's defaults) into fresh schemas with and without the
// search index, and with none of the API's indexes, to show what each
// costs on the database side of ingest. With -ingest-text-only it
// compares text search on, with the indexer working beside ingest at its
// default pacing, against text search off.
func measureIngestCost(ctx context.Context, o apiOptions) ([]apiResult, error) {
	variants := []ingestVariant{
		{name: "all indexes"},
		{name: "without dead_messages_search", drop: []string{"dead_messages_search"}},
		// The indexes that exist for q: hashed keys (GIN), body search
		// by time (BRIN), and by queue and time — the last shared with
		// status and alerts, which without body search would need only
		// its pending part (the index migration 00050 replaced).
		{name: "without the search indexes (search, brin; queue_status_failed_at -> pending only)",
			drop:        []string{"dead_messages_search", "dead_messages_failed_at_brin", "dead_messages_queue_status_failed_at"},
			pendingOnly: true},
		{name: "without any API index (search, brin, queue_status_failed_at -> pending only, group, repeat)",
			drop: []string{"dead_messages_search", "dead_messages_failed_at_brin", "dead_messages_queue_status_failed_at",
				"dead_messages_group_status_id", "dead_messages_repeat"},
			pendingOnly: true},
	}
	if o.textOnly {
		variants = []ingestVariant{
			{name: fmt.Sprintf("text search on, indexer at duty %d%%", o.textDuty), indexer: true},
			{name: "text search off", textOff: true},
		}
		if o.textNoIndexer {
			// What ingest itself pays (marking bodies, queueing rows),
			// without the indexer's concurrent work.
			variants = append(variants, ingestVariant{name: "text search on, no indexer running"})
		}
	}
	var results []apiResult
	// Alternate variants over the rounds so drift affects all alike.
	rates, cpus := map[string][]float64{}, map[string][]float64{}
	for round := range o.ingestRounds {
		for _, v := range variants {
			r, err := ingestOnce(ctx, o, v, round)
			if err != nil {
				return results, err
			}
			rates[v.name] = append(rates[v.name], r.rate)
			cpus[v.name] = append(cpus[v.name], r.cpu)
			if v.indexer {
				fmt.Printf("  round %d %s: %.0f msgs/s; indexer: %d indexed during the burst (%.1f µs PostgreSQL CPU/msg), "+
					"%d left, caught up in %s (%.0f msgs/s)\n", round+1, v.name, r.rate, r.indexedDuring, r.indexerCPU,
					r.left, r.catchUp.Round(time.Millisecond), float64(r.left)/max(r.catchUp.Seconds(), 1e-9))
				results = append(results, apiResult{Bench: "api-text-index-catch-up", Name: v.name, N: r.left,
					MsgsSec: float64(r.left) / max(r.catchUp.Seconds(), 1e-9),
					Note:    fmt.Sprintf("round=%d indexed_during_burst=%d indexer_cpu_us_per_msg=%.1f", round+1, r.indexedDuring, r.indexerCPU)})
			}
		}
	}
	median := func(f []float64) float64 {
		g := slices.Clone(f)
		slices.Sort(g)
		return g[len(g)/2]
	}
	var base, baseRate float64
	for i, v := range variants {
		rate, cpu := median(rates[v.name]), median(cpus[v.name])
		if i == 0 {
			base, baseRate = cpu, rate
		}
		fmt.Printf("ingest %-52s PostgreSQL CPU %6.1f µs/msg (%+5.1f vs first)  %7.0f msgs/s (%+5.1f%% vs first)  (runs %v)\n",
			v.name, cpu, cpu-base, rate, 100*(rate/baseRate-1), roundAll(rates[v.name]))
		results = append(results, apiResult{Bench: "api-ingest-cost", Name: v.name, N: o.ingestN, MsgsSec: rate,
			Note: fmt.Sprintf("postgres_cpu_us_per_msg=%.1f", cpu)})
	}
	if o.textOnly {
		var pairs []string
		on, off := rates[variants[0].name], rates[variants[1].name]
		for k := range on {
			pairs = append(pairs, fmt.Sprintf("%.1f%%", 100*(1-on[k]/off[k])))
		}
		fmt.Printf("text search on costs ingest %.1f%% (medians; per round %s; budget: at most 15%%)\n",
			100*(1-median(on)/median(off)), strings.Join(pairs, ", "))
	}
	return results, nil
}

func roundAll(f []float64) []int {
	out := make([]int, len(f))
	for i, v := range f {
		out[i] = int(v)
	}
	return out
}

// costRun is what one ingestOnce measured.
type costRun struct {
	rate float64 // messages per second
	cpu  float64 // the writers' PostgreSQL CPU µs per message
	// With the indexer: rows it indexed during the burst, its own
	// PostgreSQL CPU µs per indexed message, the rows left when the burst
	// ended and how long it took to index them.
	indexedDuring, left int
	indexerCPU          float64
	catchUp             time.Duration
}

// ingestOnce returns the messages per second and the CPU time PostgreSQL
// spent per message (the writers' backends, including the search index's
// deferred work: autovacuum is off for the table and the pending list is
// flushed at the end). CPU per message hardly depends on what else the
// machine runs; throughput does. With v.indexer, the text indexer runs
// beside the writers on a connection of its own, as in dlq serve.
func ingestOnce(ctx context.Context, o apiOptions, v ingestVariant, round int) (costRun, error) {
	drop, pendingOnly := v.drop, v.pendingOnly
	// The backends are told by their application name: the schema's
	// name, or with -ingest-into (an existing schema, left as it is but
	// for the rows written) a name of this run's own.
	schema := fmt.Sprintf("bench_api_ingest_%d_%s", round, randomHex(3))
	app := schema
	if o.ingestInto != "" {
		schema = o.ingestInto
	}
	admin, err := store.OpenBenchAdmin(ctx, o.pgURL)
	if err != nil {
		return costRun{}, err
	}
	defer admin.Close(ctx)
	if o.ingestInto == "" {
		if err := admin.CreateSchema(ctx, schema); err != nil {
			return costRun{}, err
		}
		defer admin.DropSchema(context.WithoutCancel(ctx), schema) //nolint:errcheck
	}
	dsn, err := withSearchPath(o.pgURL, schema+",public")
	if err != nil {
		return costRun{}, err
	}
	dsn += "&application_name=" + app
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2, TextSearch: !v.textOff})
	if err != nil {
		return costRun{}, err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return costRun{}, err
	}
	sb := st.Bench()
	if o.ingestInto == "" {
		if err := prepareCostSchema(ctx, sb, schema, drop, pendingOnly); err != nil {
			return costRun{}, err
		}
	}
	msgs := costMessages(o.ingestN, round)
	const batch, writers = 500, 2
	// Open both connections, then note their backends' CPU time.
	sb.OpenConnections(ctx, writers)
	pids, err := admin.BackendPIDs(ctx, app)
	if err != nil {
		return costRun{}, err
	}
	var ix *indexerRun
	if v.indexer {
		if ix, err = startIndexer(ctx, admin, dsn, app, o.textDuty); err != nil {
			return costRun{}, err
		}
		defer ix.stop()
	}
	cpu0 := backendsCPU(pids)
	start := time.Now()
	if err := ingestBatches(ctx, st, msgs, writers, batch); err != nil {
		return costRun{}, err
	}
	rate := float64(len(msgs)) / time.Since(start).Seconds()
	run := costRun{rate: rate}
	if ix != nil {
		if err := ix.catchUp(ctx, st, &run, len(msgs)); err != nil {
			return costRun{}, err
		}
	}
	if err := sb.FlushSearchIndexes(ctx); err != nil {
		return costRun{}, err
	}
	cpu := backendsCPU(pids) - cpu0
	run.cpu = cpu.Seconds() * 1e6 / float64(len(msgs))
	if ix != nil {
		run.indexerCPU = ix.cpu().Seconds() * 1e6 / float64(len(msgs))
	}
	return run, nil
}

// costMessages makes n messages as the consumer stores them: typed
// headers with x-death and failure details, small bodies; the same n for
// the same round.
func costMessages(n, round int) []store.NewMessage {
	r := rand.New(rand.NewPCG(7, uint64(round)))
	g := &rowGen{r: r, n: n, start: time.Now().Add(-time.Hour), span: time.Hour, groups: map[groupKey]int64{},
		groupsMu: &sync.Mutex{}, zipf: rand.NewZipf(r, 1.1, 1, uint64(len(benchQueues)-1))}
	msgs := make([]store.NewMessage, n)
	for i := range msgs {
		row, headers, death := g.message(i)
		m := store.NewMessage{
			MessageID: row[1].(string), SourceQueue: row[2].(string), SourceExchange: "app", SourceRoutingKey: row[4].(string),
			DeadLetterQueue: "dlq", Reason: row[6].(string), DeathCount: 1,
			Properties: row[11].([]byte), Headers: headers, DeathHeader: death, XDeath: row[genXDeath].([]byte), Body: row[13].([]byte),
			FirstFailedAt: row[17].(time.Time), FailedAt: row[18].(time.Time), Fingerprint: int64(i + 1),
		}
		if row[8] != nil {
			m.Failure, m.FailureType, m.FailureMessage = row[8].([]byte), row[9].(string), row[10].(string)
		}
		msgs[i] = m
	}
	return msgs
}

// ingestBatches stores msgs in batches of batch through writers
// connections at once, each writer taking every writers-th batch.
func ingestBatches(ctx context.Context, st *store.Store, msgs []store.NewMessage, writers, batch int) error {
	eg, gctx := errgroup.WithContext(ctx)
	for w := range writers {
		eg.Go(func() error {
			for lo := w * batch; lo < len(msgs); lo += writers * batch {
				hi := min(len(msgs), lo+batch)
				if _, err := st.IngestBatch(gctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "bench", Messages: msgs[lo:hi]}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// prepareCostSchema drops a fresh cost schema's indexes as the variant
// asks and switches autovacuum off, so that only the writers' work counts.
func prepareCostSchema(ctx context.Context, sb store.Bench, schema string, drop []string, pendingOnly bool) error {
	for _, ix := range drop {
		if err := sb.DropIndex(ctx, schema, ix); err != nil {
			return err
		}
	}
	if pendingOnly {
		if err := sb.CreatePendingFailedAtIndex(ctx); err != nil {
			return err
		}
	}
	return sb.DisableAutovacuum(ctx)
}
