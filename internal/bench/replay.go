package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"runtime/pprof"
	"slices"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/gctune"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// replayOptions are the flags of `dlq-bench replay`.
type replayOptions struct {
	// mode is modeSeeded or modeE2E.
	mode       string
	n          int
	size       int
	runs       int
	batch      int
	window     int
	queueType  string
	amqpURL    string
	pgURL      string
	cpuProfile string
	out        string
	// analyze (e2e): ANALYZE dead_messages after the ingest, before the
	// command, untimed. A diagnostic: freshly ingested rows were never
	// analysed, so the replay is planned on the statistics of an empty
	// table.
	analyze bool
	keep    bool
	// dropIndexes names indexes of dead_messages to drop before the run:
	// a diagnostic, to see what each index costs a replay.
	dropIndexes []string
	// encrypt lists the encryption settings measured (-encrypt).
	encrypt []bool
	cpu     cpuMeter
}

// replayResult is one measured replay task.
type replayResult struct {
	Bench     string  `json:"bench"`
	N         int     `json:"n"`
	Size      int     `json:"size"`
	Run       int     `json:"run"`
	Secs      float64 `json:"secs"`
	MsgsSec   float64 `json:"msgs_per_s"`
	CPUDlq    float64 `json:"cpu_dlq_pct"`
	CPURabbit float64 `json:"cpu_rabbit_pct"`
	CPUPg     float64 `json:"cpu_pg_pct"`
	SeedSecs  float64 `json:"seed_secs"`
	Batch     int     `json:"batch_size"`
	Window    int     `json:"window"`
	QueueType string  `json:"queue_type"`
	Dropped   string  `json:"dropped_indexes,omitempty"`
	// Encrypted: the messages were sealed at rest, and opened to publish.
	Encrypted bool `json:"encrypted"`
	// Mode is seeded (rows stored by the batch writer, the replay service
	// in this process) or e2e (a dlq serve process ingests dead letters,
	// the replay is asked for on the control queue).
	Mode string `json:"mode"`
	// IngestSecs and IngestMsgsSec: e2e only, dlq serve draining the -n
	// dead letters before the replay; IngestCPU dlq, RabbitMQ, PostgreSQL.
	IngestSecs    float64    `json:"ingest_secs,omitempty"`
	IngestMsgsSec float64    `json:"ingest_msgs_per_s,omitempty"`
	IngestCPU     [3]float64 `json:"ingest_cpu_dlq_rabbit_pg_pct,omitzero"`
	// Analyzed (e2e): dead_messages was analysed before the command.
	Analyzed bool `json:"analyzed,omitempty"`
}

// Modes of `dlq-bench replay`.
const (
	modeSeeded = "seeded"
	modeE2E    = "e2e"
)

// Replay runs `dlq-bench replay`: it replays N stored messages with dlq's
// replay service (a task with its snapshot, claims, confirmed mandatory
// publishing, settlement with counters) to a queue, and reports messages
// per second from the task's start to its completion.
func Replay(args []string) error {
	o := replayOptions{}
	fs := flag.NewFlagSet("dlq-bench replay", flag.ContinueOnError)
	fs.StringVar(&o.mode, "mode", modeSeeded, "seeded: rows stored through the ingest batch writer, replayed by the replay service in this process; "+
		"e2e: dead letters from a source queue of -queue-type ingested by a dlq serve process, then replayed to that queue on a command sent to its control queue")
	fs.IntVar(&o.n, "n", 100_000, "messages to replay")
	fs.IntVar(&o.size, "size", 1024, "body size in bytes")
	fs.IntVar(&o.runs, "runs", 3, "measured runs (the median is the figure)")
	fs.IntVar(&o.batch, "batch", 500, "messages claimed per transaction (replay.batch_size)")
	fs.IntVar(&o.window, "window", 1000, "publishes awaiting their confirm (replay.window)")
	fs.StringVar(&o.queueType, "queue-type", "quorum", "type of the target queue: quorum or classic")
	fs.StringVar(&o.amqpURL, "amqp", cmp.Or(os.Getenv("BENCH_AMQP_URL"), "amqp://guest:guest@127.0.0.1:5672/"), "RabbitMQ URL")
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"),
		"PostgreSQL URL (a schema is created in it and dropped after)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured part to this file")
	fs.StringVar(&o.out, "out", "", "append each result as a JSON line to this file")
	fs.BoolVar(&o.keep, "keep", false, "keep the schema and the queue for inspection")
	fs.BoolVar(&o.analyze, "analyze", false, "-mode e2e: ANALYZE dead_messages after the ingest, before the replay command, untimed (diagnostic: what fresh statistics change)")
	encrypt := fs.String("encrypt", "off", "encryption at rest: off, on (messages sealed under a random key, opened to publish), or both (interleaved in each run)")
	fs.Func("drop-indexes", "comma list of dead_messages indexes to drop first (diagnostic: what an index costs a replay)", func(v string) error {
		o.dropIndexes = splitList(v)
		return nil
	})
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.n < 1 || o.size < 1 || o.runs < 1 {
		return fmt.Errorf("-n, -size and -runs must be >= 1")
	}
	var err error
	if o.encrypt, err = encryptSettings(*encrypt); err != nil {
		return err
	}
	if o.queueType != "quorum" && o.queueType != "classic" {
		return fmt.Errorf("-queue-type %q: quorum or classic", o.queueType)
	}
	var bin string
	switch o.mode {
	case modeSeeded:
	case modeE2E:
		if *encrypt != "off" || len(o.dropIndexes) > 0 || o.cpuProfile != "" {
			return fmt.Errorf("-mode e2e measures dlq serve as configured: -encrypt, -drop-indexes and -cpuprofile are for -mode seeded")
		}
		var clean func()
		if bin, clean, err = buildDlq(); err != nil {
			return err
		}
		defer clean()
	default:
		return fmt.Errorf("-mode %q: seeded or e2e", o.mode)
	}
	o.cpu = newCPUMeter()
	// The replay service runs with the collector settings of dlq serve.
	gctune.Apply(slog.New(slog.DiscardHandler))
	byEnc := map[bool][]replayResult{}
	off, on := map[int]float64{}, map[int]float64{}
	for run := 1; run <= o.runs; run++ {
		for _, enc := range runOrder(o.encrypt, run) {
			var r replayResult
			var err error
			if o.mode == modeE2E {
				r, err = replayE2E(o, bin, run)
			} else {
				r, err = replayRun(o, run, enc)
			}
			if err != nil {
				return fmt.Errorf("run %d: %w", run, err)
			}
			if enc {
				on[run] = r.MsgsSec
			} else {
				off[run] = r.MsgsSec
			}
			printReplayRun(o, r, enc)
			if o.out != "" {
				if err := appendJSON(o.out, r); err != nil {
					return err
				}
			}
			byEnc[enc] = append(byEnc[enc], r)
		}
	}
	for _, enc := range o.encrypt {
		printReplayMedian(o, byEnc[enc], enc)
	}
	onOffRatio("replay", off, on)
	return nil
}

// printReplayRun prints one run's line (and, end to end, the ingest's
// before it).
func printReplayRun(o replayOptions, r replayResult, enc bool) {
	note := ""
	if enc {
		note = ", encrypted"
	}
	fmt.Printf("replay run %d (%s, %s target%s): %d messages of %d B in %.2fs = %.0f msgs/s (cpu: dlq %.0f%%, rabbitmq %.0f%%, postgres %.0f%%)\n",
		r.Run, o.mode, o.queueType, note, r.N, r.Size, r.Secs, r.MsgsSec, r.CPUDlq, r.CPURabbit, r.CPUPg)
	if o.mode == modeE2E {
		fmt.Printf("  ingest before it: %.2fs = %.0f msgs/s (cpu: dlq %.0f%%, rabbitmq %.0f%%, postgres %.0f%%)\n",
			r.IngestSecs, r.IngestMsgsSec, r.IngestCPU[0], r.IngestCPU[1], r.IngestCPU[2])
	}
}

// printReplayMedian prints the RESULT line of the runs of one encryption
// setting: their median.
func printReplayMedian(o replayOptions, results []replayResult, enc bool) {
	results = slices.Clone(results)
	slices.SortFunc(results, func(a, b replayResult) int { return cmp.Compare(a.MsgsSec, b.MsgsSec) })
	med := results[len(results)/2]
	note := ""
	if enc {
		note = ", encrypted"
	}
	fmt.Printf("RESULT replay: median of %d runs: %.0f msgs/s (%s, %d × %d B, batch %d, window %d, %s target%s%s)\n",
		len(results), med.MsgsSec, o.mode, med.N, med.Size, med.Batch, med.Window, o.queueType, dropNote(o.dropIndexes), note)
}

// replayRun measures one replay of stored rows: n pending messages stored
// through the ingest batch writer, then replayed to their queue by the
// replay service in this process, timed from the request until the task
// is completed.
func replayRun(o replayOptions, run int, encrypted bool) (replayResult, error) {
	ctx := context.Background()
	res := replayResult{Bench: "replay", Mode: modeSeeded, N: o.n, Size: o.size, Run: run, Batch: o.batch, Window: o.window, QueueType: o.queueType,
		Dropped: strings.Join(o.dropIndexes, ","), Encrypted: encrypted}
	e := &seededRun{o: o, suffix: randomHex(4)}
	defer e.undo.run()
	if err := e.setUp(ctx, encrypted); err != nil {
		return res, err
	}
	var err error
	if res.SeedSecs, err = e.seed(ctx); err != nil {
		return res, err
	}
	if err := e.measure(ctx, &res); err != nil {
		return res, err
	}
	q, err := e.ch.QueueDeclarePassive(e.queue, true, false, false, false, nil)
	if err != nil {
		return res, err
	}
	if q.Messages != o.n {
		return res, fmt.Errorf("target queue holds %d messages, want %d", q.Messages, o.n)
	}
	return res, nil
}

// seededRun is one stored-rows run's schema, store and target queue, and
// what undoes them.
type seededRun struct {
	o             replayOptions
	suffix, queue string
	st            *store.Store
	sealing       *store.Encryption
	ch            *amqp.Channel
	quiet         *slog.Logger
	undo          undoStack
}

// setUp makes the schema, migrated (less -drop-indexes), and the target
// queue of the measured type.
func (e *seededRun) setUp(ctx context.Context, encrypted bool) error {
	if encrypted {
		_, ring, err := benchKey()
		if err != nil {
			return err
		}
		e.sealing = &store.Encryption{Ring: ring}
	}
	schema := "dlqbench_replay_" + e.suffix
	e.queue = "dlqbench.replay." + e.suffix
	_, dsn, dropSchema, err := runSchema(ctx, e.o.pgURL, schema, e.o.keep)
	if err != nil {
		return err
	}
	e.undo.push(dropSchema)
	e.quiet = slog.New(slog.NewTextHandler(io.Discard, nil))
	if e.st, err = store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 16, Logger: e.quiet, Encryption: e.sealing}); err != nil {
		return err
	}
	e.undo.push(e.st.Close)
	if _, err := e.st.Migrate(ctx, nil); err != nil {
		return err
	}
	for _, ix := range e.o.dropIndexes {
		if err := e.st.Bench().DropIndex(ctx, schema, ix); err != nil {
			return fmt.Errorf("-drop-indexes: %w", err)
		}
	}

	app, err := amqp.Dial(e.o.amqpURL)
	if err != nil {
		return err
	}
	e.undo.push(func() { _ = app.Close() })
	if e.ch, err = app.Channel(); err != nil {
		return err
	}
	if _, err := e.ch.QueueDeclare(e.queue, true, false, false, false, amqp.Table{"x-queue-type": e.o.queueType}); err != nil {
		return err
	}
	if !e.o.keep {
		e.undo.push(func() { _, _ = e.ch.QueueDelete(e.queue, false, false, false) })
	}
	return nil
}

// seed stores the messages, analyses the table (as an operator's table of
// old rows would be) and lets the database settle; it returns how long
// that took (not timed).
func (e *seededRun) seed(ctx context.Context) (float64, error) {
	start := time.Now()
	if err := seedReplay(ctx, e.st, e.queue, e.o.n, e.o.size); err != nil {
		return 0, fmt.Errorf("seed: %w", err)
	}
	if err := e.st.Bench().Analyze(ctx, "dead_messages"); err != nil {
		return 0, err
	}
	if err := e.st.Bench().Checkpoint(ctx); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// measure runs the replay service, asks it for a replay of every seeded
// message and fills res with the time until the task is completed and
// each program's CPU over it (with -cpuprofile, dlq's profile of it).
func (e *seededRun) measure(ctx context.Context, res *replayResult) error {
	conn, err := broker.NewConn(broker.ConnConfig{URL: e.o.amqpURL, Name: "dlq-bench replay", Logger: e.quiet})
	if err != nil {
		return err
	}
	defer conn.Close()
	rc := replay.Config{
		Store: e.st, Conn: conn, BatchSize: e.o.batch, Window: e.o.window, PollInterval: 20 * time.Millisecond,
		MaxTaskMessages: int64(e.o.n), Logger: e.quiet,
	}
	if e.sealing != nil {
		rc.Ring = e.sealing.Ring
	}
	svc, err := replay.New(rc)
	if err != nil {
		return err
	}
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- svc.Run(runCtx) }()
	defer func() { stop(); <-done }()

	if e.o.cpuProfile != "" {
		f, err := os.Create(e.o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	cpu0, self0 := e.o.cpu.take(), selfCPU()
	start := time.Now()
	task, err := svc.Start(ctx, replay.Request{Filter: &store.Filter{SourceQueue: e.queue}}, store.Actor{Name: "bench", Via: "cli"})
	if err != nil {
		return err
	}
	for {
		t, err := svc.Get(ctx, task.ID)
		if err != nil {
			return err
		}
		if store.TaskFinished(t.Status) {
			if t.Status != replay.StatusCompleted || t.Published != int64(e.o.n) {
				b, _ := json.Marshal(t)
				return fmt.Errorf("task ended badly: %s", b)
			}
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	secs := time.Since(start).Seconds()
	cpu1, self1 := e.o.cpu.take(), selfCPU()
	res.Secs = secs
	res.MsgsSec = float64(e.o.n) / secs
	res.CPUDlq = 100 * (self1 - self0) / secs
	res.CPURabbit = 100 * (cpu1.rmqSec - cpu0.rmqSec) / secs
	res.CPUPg = 100 * (cpu1.pgSec - cpu0.pgSec) / secs
	return nil
}

// seedReplay stores n pending messages of size bytes that died in queue,
// through the same batch writer as ingest. Each batch is confirmed in the
// next one, as the consumer does once its acknowledgements reached the
// broker: the messages an operator replays were stored minutes ago, and
// their batches have long left ingest_inflight.
func seedReplay(ctx context.Context, st *store.Store, queue string, n, size int) error {
	body := make([]byte, size)
	for i := range body {
		body[i] = 'a' + byte(i%26)
	}
	headers := []byte(`{"x-app":"bench","x-attempt":{"type":"int32","value":3},"x-tenant":"acme"}`)
	props := []byte(`{"content_type":"application/json","delivery_mode":2,"message_id":"bench"}`)
	now := time.Now().UTC()
	msgs := make([]store.NewMessage, 0, 1000)
	var prev []int64
	for i := 0; i < n; i++ {
		msgs = append(msgs, store.NewMessage{
			MessageID: fmt.Sprintf("bench-%d", i), SourceQueue: queue, SourceRoutingKey: queue, DeadLetterQueue: "dlq",
			Reason: "rejected", DeathCount: 1, FailureType: "TimeoutError", FailureMessage: "upstream timed out",
			Properties: props, Headers: headers, Body: body, FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1),
		})
		if len(msgs) == cap(msgs) || i == n-1 {
			id := store.NewBatchID()
			if _, err := st.IngestBatch(ctx, store.IngestBatch{ID: id, Consumer: "bench", Messages: msgs, Confirmed: prev}); err != nil {
				return err
			}
			prev = []int64{id}
			msgs = msgs[:0]
		}
	}
	return st.ConfirmBatches(ctx, prev)
}

func dropNote(ix []string) string {
	if len(ix) == 0 {
		return ""
	}
	return ", without indexes " + strings.Join(ix, ", ")
}
