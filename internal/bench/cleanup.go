package bench

import (
	"cmp"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/store"
)

// cleanupOptions are the flags of `dlq-bench cleanup`.
type cleanupOptions struct {
	pgURL, amqpURL string
	eligible       int
	ingestN        int
	size           int
	batch          int
	pauses         []time.Duration
	statusSchema   string
	statusN        int
	reuse          bool
	iterations     int
	skipDelete     bool
	skipStatus     bool
	runs           int
	window         time.Duration
	out            string
	textSearch     bool
}

type cleanupResult struct {
	Bench string `json:"bench"`
	Name  string `json:"name"`
	// Delete under ingest.
	Eligible       int     `json:"eligible,omitempty"`
	BatchSize      int     `json:"batch_size,omitempty"`
	Pause          string  `json:"pause,omitempty"`
	IngestBaseline float64 `json:"ingest_baseline_msgs_per_s,omitempty"`
	IngestDuring   float64 `json:"ingest_during_cleanup_msgs_per_s,omitempty"`
	DropPct        float64 `json:"ingest_drop_pct,omitempty"`
	DeleteRate     float64 `json:"delete_rows_per_s,omitempty"`
	CleanupSecs    float64 `json:"cleanup_secs,omitempty"`
	OverlapSecs    float64 `json:"overlap_secs,omitempty"`
	// Reads at N rows.
	Rows  int     `json:"rows,omitempty"`
	P50ms float64 `json:"p50_ms,omitempty"`
	P99ms float64 `json:"p99_ms,omitempty"`
	MaxMs float64 `json:"max_ms,omitempty"`
	// LoadAvg is the 1-minute load average when the result was taken: the
	// machine may be shared.
	LoadAvg float64 `json:"load_avg"`
}

// Cleanup runs `dlq-bench cleanup`: what the cleanup job costs ingest while
// it deletes expired messages, and how fast status and the gauges read at
// millions of stored messages.
func Cleanup(args []string) error {
	def := config.Default()
	o := cleanupOptions{}
	var pauses string
	fs := flag.NewFlagSet("dlq-bench cleanup", flag.ContinueOnError)
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"), "PostgreSQL database")
	fs.StringVar(&o.amqpURL, "amqp", cmp.Or(os.Getenv("DLQ_AMQP_URL"), config.AMQPURLDefault), "RabbitMQ URL")
	fs.IntVar(&o.eligible, "eligible", 1_000_000, "resolved messages past their retention, deleted while ingest runs")
	fs.IntVar(&o.ingestN, "ingest", 1_000_000, "dead letters ingested while cleanup alternates on and off (enough to outlast the deletion)")
	fs.DurationVar(&o.window, "window", 6*time.Second, "length of each cleanup-on and cleanup-off window")
	fs.BoolVar(&o.textSearch, "text-search", config.Default().Ingest.TextSearch, "delete under ingest as dlq serve runs with text search (its default): the expired rows have documents, ingest queues its rows and the text indexer runs beside")
	fs.IntVar(&o.size, "size", 512, "body bytes of the ingested dead letters")
	fs.IntVar(&o.batch, "batch", def.Cleanup.BatchSize, "cleanup batch size (rows per transaction)")
	fs.StringVar(&pauses, "pause", def.Cleanup.Pause.D().String(), "comma list of pauses between cleanup batches (default: the configuration default); each is one delete-under-ingest run")
	fs.StringVar(&o.statusSchema, "status-schema", "bench_cleanup_status", "schema with -status-rows generated messages (the generator of `dlq-bench api`; pass -status-schema bench_api to share its schema)")
	fs.IntVar(&o.statusN, "status-rows", 10_000_000, "messages in the status schema")
	fs.BoolVar(&o.reuse, "reuse", true, "reuse the status schema when it already holds -status-rows messages")
	fs.IntVar(&o.iterations, "iterations", 1000, "timed reads per measurement (after 20 warm-up reads)")
	fs.BoolVar(&o.skipDelete, "skip-delete", false, "skip the delete-under-ingest measurement")
	fs.BoolVar(&o.skipStatus, "skip-status", false, "skip the status and gauge read measurement")
	fs.IntVar(&o.runs, "runs", 1, "delete-under-ingest runs per pause (each loads its own expired messages); the summary shows the median")
	fs.StringVar(&o.out, "out", "", "append results as JSON lines to this file")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	for _, p := range splitList(pauses) {
		d, err := time.ParseDuration(p)
		if err != nil {
			return fmt.Errorf("-pause %q: %w", p, err)
		}
		o.pauses = append(o.pauses, d)
	}
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())
	ctx := context.Background()
	var results []cleanupResult
	if !o.skipDelete {
		for _, pause := range o.pauses {
			var drops, rates []float64
			for run := 1; run <= o.runs; run++ {
				r, err := deleteUnderIngest(ctx, o, pause)
				if err != nil {
					return err
				}
				results = append(results, r)
				drops, rates = append(drops, r.DropPct), append(rates, r.DeleteRate)
			}
			slices.Sort(drops)
			slices.Sort(rates)
			fmt.Printf("pause %s over %d runs: median ingest drop %.1f%% (all: %.1f), median delete rate %.0f rows/s\n",
				pause, o.runs, drops[len(drops)/2], drops, rates[len(rates)/2])
		}
	}
	if !o.skipStatus {
		rs, err := statusReads(ctx, o)
		results = append(results, rs...)
		if err != nil {
			return err
		}
	}
	if o.out != "" {
		for _, r := range results {
			if err := appendJSON(o.out, r); err != nil {
				return err
			}
		}
	}
	return nil
}

func splitList(s string) []string {
	var out []string
	for _, p := range strings.Split(s, ",") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// deleteUnderIngest ingests o.ingestN dead letters at full speed while the
// cleanup job deletes o.eligible expired messages, in alternating windows:
// the job runs in one window and is stopped in the next. On a machine whose
// background load drifts (a shared one), comparing each window with its
// neighbours measures the job's cost far better than two long runs one
// after the other. Ingest never stops; the job (a fresh cron.Service per
// window, exactly as dlq serve runs it) resumes where it left off, since
// its work is simply "whatever is still expired".
func deleteUnderIngest(ctx context.Context, o cleanupOptions, pause time.Duration) (cleanupResult, error) {
	res := cleanupResult{Bench: "cleanup", Name: "delete_under_ingest", Eligible: o.eligible, BatchSize: o.batch, Pause: pause.String()}
	suffix := randomHex(4)
	schema := "bench_cleanup_" + suffix
	_, dsn, dropSchema, err := runSchema(ctx, o.pgURL, schema, false)
	if err != nil {
		return res, err
	}
	defer dropSchema()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 16, TextSearch: o.textSearch})
	if err != nil {
		return res, err
	}
	defer st.Close()
	stopIndexer, err := loadCleanupStore(ctx, o, st)
	if err != nil {
		return res, err
	}
	defer stopIndexer()

	exchange, queue := "bench.cleanup.dlx."+suffix, "bench.cleanup.dlq."+suffix
	conn, _, err := dialDLQ(o.amqpURL, exchange, queue, "")
	if err != nil {
		return res, err
	}
	defer conn.Close()
	defer deleteCleanupQueue(o.amqpURL, exchange, queue)
	if err := prefillCleanupQueue(ctx, o, st, conn, exchange, queue, suffix); err != nil {
		return res, err
	}

	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	bc, err := broker.NewConn(broker.ConnConfig{URL: o.amqpURL, Name: "dlq-bench cleanup", Logger: quiet})
	if err != nil {
		return res, err
	}
	defer bc.Close()
	def := config.Default().Ingest
	creg := prometheus.NewRegistry()
	cons, err := consumer.New(consumer.Config{
		Conn: bc, Store: st, Exchange: exchange, Queues: []string{queue},
		Consumers: def.Consumers, Prefetch: def.Prefetch, BatchSize: def.BatchSize, BatchBytes: def.BatchBytes,
		Linger: def.Linger.D(), Logger: quiet, Registerer: creg,
	})
	if err != nil {
		return res, err
	}
	cctx, cancel := context.WithCancel(ctx)
	defer cancel()
	consDone := make(chan error, 1)
	go func() { consDone <- cons.Run(cctx) }()
	ingested := func() float64 { return metricSum(creg, "dlq_messages_ingested_total") }
	startJob := func() (func() float64, error) { return startCleanupJob(st, quiet, o.batch, pause) }
	windows, err := cleanupWindows(ctx, o, st, ingested, startJob)
	if err != nil {
		return res, err
	}
	cancel()
	if err := <-consDone; err != nil {
		return res, err
	}
	return summarizeCleanupWindows(ctx, o, st, pause, res, windows)
}

// loadCleanupStore migrates st's schema and loads o.eligible expired
// messages into it; with o.textSearch it starts the text indexer over
// them, and returns what stops it.
func loadCleanupStore(ctx context.Context, o cleanupOptions, st *store.Store) (stopIndexer func(), err error) {
	if _, err := st.Migrate(ctx, nil); err != nil {
		return nil, err
	}
	t := time.Now()
	if err := loadExpired(ctx, st, o.eligible); err != nil {
		return nil, fmt.Errorf("load expired messages: %w", err)
	}
	fmt.Printf("loaded %d expired resolved messages in %s\n", o.eligible, time.Since(t).Round(time.Second))
	if !o.textSearch {
		return func() {}, nil
	}
	return indexExpired(ctx, st)
}

// deleteCleanupQueue deletes the run's queue and exchange, on a
// connection of its own.
func deleteCleanupQueue(amqpURL, exchange, queue string) {
	if c, err := amqp.Dial(amqpURL); err == nil {
		if ch, err := c.Channel(); err == nil {
			_, _ = ch.QueueDelete(queue, false, false, false)
			_ = ch.ExchangeDelete(exchange, false, false)
		}
		_ = c.Close()
	}
}

// prefillCleanupQueue publishes o.ingestN dead letters to exchange and
// waits until queue holds them all, then checkpoints st's database.
func prefillCleanupQueue(ctx context.Context, o cleanupOptions, st *store.Store, conn *amqp.Connection, exchange, queue, suffix string) error {
	t := time.Now()
	if err := prefill(ctx, conn, exchange, "orders.created", true, o.ingestN, o.size, suffix); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if err := waitReady(conn, queue, o.ingestN, 10*time.Minute); err != nil {
		return err
	}
	if err := st.Bench().Checkpoint(ctx); err != nil {
		return err
	}
	fmt.Printf("prefilled %d dead letters in %s\n", o.ingestN, time.Since(t).Round(time.Second))
	return nil
}

// startCleanupJob starts a cron.Service that runs only the cleanup job,
// as dlq serve does, with batch and pause. The function it returns stops
// the service and returns the rows the job deleted.
func startCleanupJob(st *store.Store, log *slog.Logger, batch int, pause time.Duration) (func() float64, error) {
	reg := prometheus.NewRegistry()
	svc, err := cron.New(cron.Config{
		Store: st, Logger: log, Registerer: reg, Instance: "bench",
		Schedules: cron.Only(cron.Schedules{Cleanup: "@every 100ms"}),
		Cleanup:   cleanup.Config{BatchSize: batch, Pause: pause}, LeaseTTL: 30 * time.Second,
	})
	if err != nil {
		return nil, err
	}
	svc.Start()
	return func() float64 {
		sctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = svc.Stop(sctx)
		return metricSum(reg, "dlq_cleanup_deleted_total")
	}, nil
}

// cleanupWindow is one window of deleteUnderIngest: whether the cleanup
// job ran in it, ingest's rate, what the job deleted, and its length.
type cleanupWindow struct {
	on      bool
	rate    float64
	deleted float64
	secs    float64
}

// cleanupWindows runs the windows: off, on, off, on, ... after a warm-up,
// until the expired messages are gone or ingest is nearly done. ingested
// reads how many messages were ingested so far; startJob starts the
// cleanup job for an on window.
func cleanupWindows(ctx context.Context, o cleanupOptions, st *store.Store, ingested func() float64, startJob func() (func() float64, error)) ([]cleanupWindow, error) {
	time.Sleep(time.Second)
	var windows []cleanupWindow
	total := float64(o.ingestN)
	for on := false; ; on = !on {
		n0, t0 := ingested(), time.Now()
		if n0 > 0.9*total {
			break
		}
		var stop func() float64
		if on {
			var err error
			if stop, err = startJob(); err != nil {
				return windows, err
			}
		}
		time.Sleep(o.window)
		n1, t1 := ingested(), time.Now()
		w := cleanupWindow{on: on, rate: (n1 - n0) / t1.Sub(t0).Seconds(), secs: t1.Sub(t0).Seconds()}
		if stop != nil {
			w.deleted = stop()
		}
		if n1 >= total {
			break // ingest ended inside the window: not a full window
		}
		windows = append(windows, w)
		state := "off"
		if on {
			state = "on "
		}
		fmt.Printf("  window %2d cleanup %s ingest %6.0f msgs/s, deleted %7.0f\n", len(windows), state, w.rate, w.deleted)
		if on {
			left, err := st.Bench().AnyResolved(ctx)
			if err != nil {
				return windows, err
			}
			if !left {
				break
			}
		}
	}
	return windows, nil
}

// summarizeCleanupWindows fills res from the windows and prints it.
func summarizeCleanupWindows(ctx context.Context, o cleanupOptions, st *store.Store, pause time.Duration, res cleanupResult, windows []cleanupWindow) (cleanupResult, error) {
	c := compareCleanupWindows(windows)
	if len(c.drops) == 0 {
		return res, errors.New("no complete on window: raise -ingest or lower -window")
	}
	slices.Sort(c.drops)
	res.IngestBaseline = mean(c.offRates)
	res.IngestDuring = mean(c.onRates)
	res.DropPct = c.drops[len(c.drops)/2]
	res.CleanupSecs = c.onSecs
	res.DeleteRate = c.deleted / c.onSecs
	res.OverlapSecs = c.onSecs
	res.LoadAvg = loadAvg()
	left, err := st.Bench().CountResolved(ctx)
	if err != nil {
		return res, err
	}
	fmt.Printf("ingest %.0f msgs/s with cleanup stopped, %.0f with it running: median drop %.1f%% over %d window pairs (each: %.1f); "+
		"cleanup deleted %.0f in %.1fs of running = %.0f rows/s (%d expired left); batch %d, pause %s; load average %.1f\n",
		res.IngestBaseline, res.IngestDuring, res.DropPct, len(c.drops), c.drops, c.deleted, c.onSecs, res.DeleteRate, left, o.batch, pause, res.LoadAvg)
	return res, nil
}

// cleanupComparison is the windows compared: ingest's drop in each on
// window that deleted something, against the mean of the off windows on
// either side; the rates of the off and of those on windows; and those on
// windows' length and deletions.
type cleanupComparison struct {
	drops, offRates, onRates []float64
	onSecs, deleted          float64
}

// compareCleanupWindows compares each on window with its neighbours.
func compareCleanupWindows(windows []cleanupWindow) cleanupComparison {
	var c cleanupComparison
	for i, w := range windows {
		if !w.on {
			c.offRates = append(c.offRates, w.rate)
			continue
		}
		if w.deleted == 0 {
			continue // nothing was left to delete: not a cleanup window
		}
		c.onRates = append(c.onRates, w.rate)
		c.onSecs += w.secs
		c.deleted += w.deleted
		var ref []float64
		if i > 0 {
			ref = append(ref, windows[i-1].rate)
		}
		if i+1 < len(windows) {
			ref = append(ref, windows[i+1].rate)
		}
		if len(ref) > 0 {
			var sum float64
			for _, r := range ref {
				sum += r
			}
			c.drops = append(c.drops, (1-w.rate/(sum/float64(len(ref))))*100)
		}
	}
	return c
}

// loadExpired COPYs n messages resolved 40 days ago (half replayed, half
// acknowledged) over 20 source queues, then derives queue_summary and
// analyzes.
func loadExpired(ctx context.Context, st *store.Store, n int) error {
	sb := st.Bench()
	old := time.Now().Add(-40 * 24 * time.Hour)
	cols := []string{"message_id", "source_queue", "dead_letter_queue", "reason", "properties", "headers", "body", "body_size",
		"status", "replay_count", "first_failed_at", "failed_at", "replayed_at", "acknowledged_at", "status_changed_at", "fingerprint"}
	body := make([]byte, 200)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	props, headers := []byte(`{"content_type":"application/json"}`), []byte(`{"x-tenant":"acme"}`)
	const chunk = 250_000
	for c := 0; c < n; c += chunk {
		end := min(n, c+chunk)
		i := c
		_, err := sb.CopyMessages(ctx, cols, func() ([]any, error) {
			if i >= end {
				return nil, nil
			}
			at := old.Add(time.Duration(i) * time.Millisecond)
			var replayedAt, ackAt any
			status := store.StatusAcknowledged
			if i%2 == 0 {
				status, replayedAt = store.StatusReplayed, at.Add(time.Minute)
			} else {
				ackAt = at.Add(time.Minute)
			}
			row := []any{fmt.Sprintf("expired-%d", i), benchQueues[i%len(benchQueues)], "dlq", "rejected", props, headers,
				body, len(body), status, 1, at, at, replayedAt, ackAt, at, int64(i)}
			i++
			return row, nil
		})
		if err != nil {
			return err
		}
	}
	if err := sb.DeriveQueueSummary(ctx); err != nil {
		return err
	}
	return sb.VacuumAnalyze(ctx, "dead_messages")
}

// statusReads times the status read (store.QueueStatus, what GET
// /api/v1/status and the gauges read) and a full scrape of the summary
// gauges, at o.statusN stored messages.
func statusReads(ctx context.Context, o cleanupOptions) ([]cleanupResult, error) {
	dsn, err := withSearchPath(o.pgURL, o.statusSchema+",public")
	if err != nil {
		return nil, err
	}
	if err := prepareAPISchema(ctx, apiOptions{pgURL: o.pgURL, schema: o.statusSchema, n: o.statusN, reuse: o.reuse}, dsn); err != nil {
		return nil, err
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	// A schema generated before the cron migration gets its indexes now.
	if r, err := st.Migrate(ctx, nil); err != nil {
		return nil, err
	} else if len(r.Applied) > 0 {
		fmt.Printf("applied %v to %s\n", r.Applied, o.statusSchema)
		if err := st.Bench().VacuumAnalyze(ctx, "dead_messages"); err != nil {
			return nil, err
		}
	}
	rows, err := st.Bench().SummaryCount(ctx)
	if err != nil {
		return nil, err
	}
	reg := prometheus.NewRegistry()
	svc, err := cron.New(cron.Config{
		Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: reg, Disabled: true,
		Cleanup: cleanup.Config{Capacity: cleanup.Capacity{MaxMessages: 20_000_000}},
	})
	if err != nil {
		return nil, err
	}
	defer func() { _ = svc.Stop(context.Background()) }()

	measure := func(name string, f func() error) (cleanupResult, error) {
		for range 20 {
			if err := f(); err != nil {
				return cleanupResult{}, fmt.Errorf("%s: %w", name, err)
			}
		}
		d := make([]time.Duration, 0, o.iterations)
		for range o.iterations {
			t := time.Now()
			if err := f(); err != nil {
				return cleanupResult{}, fmt.Errorf("%s: %w", name, err)
			}
			d = append(d, time.Since(t))
		}
		slices.Sort(d)
		r := cleanupResult{Bench: "cleanup", Name: name, Rows: int(rows), P50ms: ms(pct(d, 0.50)), P99ms: ms(pct(d, 0.99)), MaxMs: ms(d[len(d)-1]), LoadAvg: loadAvg()}
		fmt.Printf("%-16s at %d rows: p50 %.2f ms, p99 %.2f ms, max %.2f ms (load average %.1f)\n", name, rows, r.P50ms, r.P99ms, r.MaxMs, r.LoadAvg)
		return r, nil
	}
	var out []cleanupResult
	for _, m := range []struct {
		name string
		f    func() error
	}{
		{"status_read", func() error {
			rep, err := st.QueueStatus(ctx, nil)
			if err == nil && len(rep.Queues) == 0 {
				err = errors.New("no queues")
			}
			return err
		}},
		{"gauge_scrape", func() error {
			mfs, err := reg.Gather()
			if err == nil && len(mfs) < 4 {
				err = fmt.Errorf("only %d metric families", len(mfs))
			}
			return err
		}},
		{"alert_snapshot", func() error {
			_, err := st.AlertNumbers(ctx, alerts.DefaultRuleSet().CountLimit(alerts.KindIngestSpike))
			return err
		}},
	} {
		r, err := measure(m.name, m.f)
		if err != nil {
			return out, err
		}
		out = append(out, r)
	}
	return out, nil
}
