package bench

import (
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dlq/dlq/store"
)

// measureIngestCost writes the same messages with IngestBatch (two writers,
// batches of 500, dlq's defaults) into fresh schemas with and without the
// search index, and with none of the API's indexes, to show what each
// costs on the database side of ingest.
func measureIngestCost(ctx context.Context, o apiOptions) ([]apiResult, error) {
	variants := []struct {
		name string
		drop []string
		// pendingOnly adds the index of pending messages by queue and
		// time that status and alerts read without body search.
		pendingOnly bool
	}{
		{"all indexes", nil, false},
		{"without dead_messages_search", []string{"dead_messages_search"}, false},
		// The indexes that exist for q: hashed keys (GIN), body search
		// by time (BRIN), and by queue and time — the last shared with
		// status and alerts, which without body search would need only
		// its pending part (the index migration 00050 replaced).
		{"without the search indexes (search, brin; queue_status_failed_at -> pending only)",
			[]string{"dead_messages_search", "dead_messages_failed_at_brin", "dead_messages_queue_status_failed_at"},
			true},
		{"without any API index (search, brin, queue_status_failed_at -> pending only, group, repeat)",
			[]string{"dead_messages_search", "dead_messages_failed_at_brin", "dead_messages_queue_status_failed_at",
				"dead_messages_group_status_id", "dead_messages_repeat"},
			true},
	}
	if o.textOnly {
		// The text index alone: every index, and every index but it.
		variants = variants[:0]
		variants = append(variants, struct {
			name        string
			drop        []string
			pendingOnly bool
		}{"all indexes", nil, false}, struct {
			name        string
			drop        []string
			pendingOnly bool
		}{"without dead_messages_text", []string{"dead_messages_text"}, false})
	} else {
		variants = append(variants[:2], append([]struct {
			name        string
			drop        []string
			pendingOnly bool
		}{{"without dead_messages_text", []string{"dead_messages_text"}, false}}, variants[2:]...)...)
	}
	var results []apiResult
	// Alternate variants over three rounds so drift affects all alike.
	rates, cpus := map[string][]float64{}, map[string][]float64{}
	for round := range o.ingestRounds {
		for _, v := range variants {
			rate, cpu, err := ingestOnce(ctx, o, v.drop, v.pendingOnly, round)
			if err != nil {
				return results, err
			}
			rates[v.name] = append(rates[v.name], rate)
			cpus[v.name] = append(cpus[v.name], cpu)
		}
	}
	median := func(f []float64) float64 {
		g := slices.Clone(f)
		slices.Sort(g)
		return g[len(g)/2]
	}
	var base float64
	for i, v := range variants {
		rate, cpu := median(rates[v.name]), median(cpus[v.name])
		if i == 0 {
			base = cpu
		}
		fmt.Printf("ingest %-52s PostgreSQL CPU %6.1f µs/msg (%+5.1f vs all indexes)  %7.0f msgs/s  (runs %v)\n",
			v.name, cpu, cpu-base, rate, roundAll(rates[v.name]))
		results = append(results, apiResult{Bench: "api-ingest-cost", Name: v.name, N: o.ingestN, MsgsSec: rate,
			Note: fmt.Sprintf("postgres_cpu_us_per_msg=%.1f", cpu)})
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

// ingestOnce returns the messages per second and the CPU time PostgreSQL
// spent per message (the writers' backends, including the search index's
// deferred work: autovacuum is off for the table and the pending list is
// flushed at the end). CPU per message hardly depends on what else the
// machine runs; throughput does.
func ingestOnce(ctx context.Context, o apiOptions, drop []string, pendingOnly bool, round int) (float64, float64, error) {
	schema := fmt.Sprintf("bench_api_ingest_%d_%s", round, randomHex(3))
	admin, err := store.OpenBenchAdmin(ctx, o.pgURL)
	if err != nil {
		return 0, 0, err
	}
	defer admin.Close(ctx)
	if err := admin.CreateSchema(ctx, schema); err != nil {
		return 0, 0, err
	}
	defer admin.DropSchema(context.WithoutCancel(ctx), schema) //nolint:errcheck
	dsn, err := withSearchPath(o.pgURL, schema+",public")
	if err != nil {
		return 0, 0, err
	}
	dsn += "&application_name=" + schema
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2, TextSearch: true})
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return 0, 0, err
	}
	sb := st.Bench()
	for _, ix := range drop {
		if err := sb.DropIndex(ctx, schema, ix); err != nil {
			return 0, 0, err
		}
	}
	if pendingOnly {
		if err := sb.CreatePendingFailedAtIndex(ctx); err != nil {
			return 0, 0, err
		}
	}
	if err := sb.DisableAutovacuum(ctx); err != nil {
		return 0, 0, err
	}
	// Messages as the consumer stores them: typed headers with x-death and
	// failure details, small bodies.
	r := rand.New(rand.NewPCG(7, uint64(round)))
	g := &rowGen{r: r, n: o.ingestN, start: time.Now().Add(-time.Hour), span: time.Hour, groups: map[groupKey]int64{},
		groupsMu: &sync.Mutex{}, zipf: rand.NewZipf(r, 1.1, 1, uint64(len(benchQueues)-1))}
	msgs := make([]store.NewMessage, o.ingestN)
	for i := range msgs {
		row := g.row(i)
		m := store.NewMessage{
			MessageID: row[1].(string), SourceQueue: row[2].(string), SourceExchange: "app", SourceRoutingKey: row[4].(string),
			DeadLetterQueue: "dlq", Reason: row[6].(string), DeathCount: 1,
			Properties: row[11].([]byte), Headers: row[12].([]byte), Body: row[13].([]byte),
			FirstFailedAt: row[17].(time.Time), FailedAt: row[18].(time.Time), Fingerprint: int64(i + 1),
		}
		if row[8] != nil {
			m.Failure, m.FailureType, m.FailureMessage = row[8].([]byte), row[9].(string), row[10].(string)
		}
		msgs[i] = m
	}
	const batch, writers = 500, 2
	// Open both connections, then note their backends' CPU time.
	sb.OpenConnections(ctx, writers)
	pids, err := admin.BackendPIDs(ctx, schema)
	if err != nil {
		return 0, 0, err
	}
	cpu0 := backendsCPU(pids)
	start := time.Now()
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
	if err := eg.Wait(); err != nil {
		return 0, 0, err
	}
	rate := float64(len(msgs)) / time.Since(start).Seconds()
	if err := sb.FlushSearchIndexes(ctx); err != nil {
		return 0, 0, err
	}
	cpu := backendsCPU(pids) - cpu0
	return rate, cpu.Seconds() * 1e6 / float64(len(msgs)), nil
}
