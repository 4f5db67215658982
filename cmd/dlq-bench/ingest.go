package main

import (
	"cmp"
	"context"
	crand "crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/url"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/gctune"
	"github.com/dlq/dlq/store"
)

// ingestOptions are the flags of `dlq-bench ingest`.
type ingestOptions struct {
	n         int
	sizes     []int
	runs      int
	queueType string
	mode      string
	// deadLetter is how the prefill makes dead letters: direct (published
	// to the exchange with the headers RabbitMQ would write), reject or ttl
	// (RabbitMQ dead-letters them from a source queue).
	deadLetter string
	amqpURL    string
	pgURL      string
	cpuProfile string
	out        string
	keep       bool
	ingest     config.Ingest
	// withoutIndexes are dropped after migrating: a diagnostic to price an
	// index at ingest, never for recorded figures.
	withoutIndexes []string
}

// ingestResult is one measured drain.
type ingestResult struct {
	Bench      string  `json:"bench"`
	Mode       string  `json:"mode"`
	QueueType  string  `json:"queue_type"`
	DeadLetter string  `json:"dead_letter"`
	Size       int     `json:"size"`
	N          int     `json:"n"`
	Run        int     `json:"run"`
	Secs       float64 `json:"secs"`
	MsgsSec    float64 `json:"msgs_per_s"`
	MBSec      float64 `json:"mb_per_s"`
	// CPU in percent of one core over the drain: dlq (this process in
	// inproc mode, the dlq serve process in process mode), RabbitMQ and
	// PostgreSQL (every process of their users).
	CPUDlq    float64 `json:"cpu_dlq_pct"`
	CPURabbit float64 `json:"cpu_rabbit_pct"`
	CPUPg     float64 `json:"cpu_pg_pct"`
	// PeakRSSMB is the dlq serve process's VmHWM (process mode only).
	PeakRSSMB   float64 `json:"peak_rss_mb,omitempty"`
	PrefillSecs float64 `json:"prefill_secs"`
	// BatchMs and BatchMsgs are the mean time to write and commit one batch
	// and its mean size (inproc mode, from dlq's own histograms).
	BatchMs   float64 `json:"batch_ms,omitempty"`
	BatchMsgs float64 `json:"batch_msgs,omitempty"`
	// WithoutIndexes lists indexes dropped for a diagnostic run.
	WithoutIndexes []string `json:"without_indexes,omitempty"`
	Consumers      int      `json:"consumers"`
	Prefetch       int      `json:"prefetch"`
	BatchSize      int      `json:"batch_size"`
	Linger         string   `json:"linger"`
}

func benchIngest(args []string) error {
	def := config.Default()
	o := ingestOptions{ingest: def.Ingest}
	fs := flag.NewFlagSet("dlq-bench ingest", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 200000, "dead letters per run")
	sizes := fs.String("size", "1024,16384", "body sizes in bytes, comma list (one set of runs each)")
	fs.IntVar(&o.runs, "runs", 3, "runs per size; the summary shows the median")
	fs.StringVar(&o.queueType, "queue-type", "quorum", "type of dlq's queue: quorum (what dlq declares) or classic")
	fs.StringVar(&o.deadLetter, "dead-letter", "direct", "how the (untimed) prefill makes dead letters: direct (published to the exchange with the death headers RabbitMQ writes), reject (RabbitMQ dead-letters them from a source queue whose consumer rejects them) or ttl (they expire in a source queue with a message TTL of 0)")
	fs.StringVar(&o.mode, "mode", "inproc", "inproc: consumer.New in this process; process: a `dlq serve` subprocess (measures its peak RSS)")
	fs.StringVar(&o.amqpURL, "amqp", cmp.Or(os.Getenv("DLQ_AMQP_URL"), config.AMQPURLDefault), "RabbitMQ URL")
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"),
		"PostgreSQL database; each run gets a fresh schema in it")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of each timed drain (inproc mode) to this file; runs after the first get -<size>-<run> before the extension")
	fs.StringVar(&o.out, "out", "", "append each result as a JSON line to this file")
	fs.BoolVar(&o.keep, "keep", false, "keep each run's schema, exchange and queue")
	fs.IntVar(&o.ingest.Consumers, "consumers", def.Ingest.Consumers, "consumers per queue (default: dlq's default)")
	fs.IntVar(&o.ingest.Prefetch, "prefetch", def.Ingest.Prefetch, "prefetch per consumer (default: dlq's default)")
	fs.IntVar(&o.ingest.BatchSize, "batch", def.Ingest.BatchSize, "messages per transaction (default: dlq's default)")
	without := fs.String("without-index", "", "diagnostic: drop these dead_messages indexes (comma list) before the drain, to price them; never for recorded figures")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, ix := range strings.Split(*without, ",") {
		if ix = strings.TrimSpace(ix); ix != "" {
			o.withoutIndexes = append(o.withoutIndexes, ix)
		}
	}
	for _, s := range strings.Split(*sizes, ",") {
		v, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || v < 16 {
			return fmt.Errorf("-size: %q is not a body size of at least 16 bytes", s)
		}
		o.sizes = append(o.sizes, v)
	}
	switch {
	case o.n <= 0:
		return fmt.Errorf("-n must be positive, got %d", o.n)
	case o.runs <= 0:
		return fmt.Errorf("-runs must be positive, got %d", o.runs)
	case o.mode != "inproc" && o.mode != "process":
		return fmt.Errorf("-mode must be inproc or process, got %q", o.mode)
	case o.queueType != "quorum" && o.queueType != "classic":
		return fmt.Errorf("-queue-type must be quorum or classic, got %q", o.queueType)
	case o.deadLetter != "direct" && o.deadLetter != "reject" && o.deadLetter != "ttl":
		return fmt.Errorf("-dead-letter must be direct, reject or ttl, got %q", o.deadLetter)
	case o.cpuProfile != "" && o.mode != "inproc":
		return errors.New("-cpuprofile needs -mode inproc (the consumer must run in this process)")
	}
	// The in-process consumer runs with the collector settings of dlq serve.
	gctune.Apply(slog.New(slog.DiscardHandler))

	var bin string
	if o.mode == "process" {
		dir, err := os.MkdirTemp("", "dlq-bench-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(dir)
		bin = filepath.Join(dir, "dlq")
		build := exec.Command("go", "build", "-o", bin, "github.com/dlq/dlq/cmd/dlq")
		build.Stdout, build.Stderr = os.Stderr, os.Stderr
		if err := build.Run(); err != nil {
			return fmt.Errorf("build dlq: %w", err)
		}
	}
	initCPU()
	fmt.Printf("ingest benchmark: n=%d sizes=%v runs=%d mode=%s queue=%s dead-letter=%s consumers=%d prefetch=%d batch=%d linger=%s\n",
		o.n, o.sizes, o.runs, o.mode, o.queueType, o.deadLetter, o.ingest.Consumers, o.ingest.Prefetch, o.ingest.BatchSize, o.ingest.Linger.D())

	var all []ingestResult
	for _, size := range o.sizes {
		for run := 1; run <= o.runs; run++ {
			r, err := ingestRun(o, bin, size, run)
			if err != nil {
				return fmt.Errorf("size %d run %d: %w", size, run, err)
			}
			all = append(all, r)
			printResult(r)
			if o.out != "" {
				if err := appendJSON(o.out, r); err != nil {
					return err
				}
			}
		}
	}
	printIngestSummary(all)
	return nil
}

func printResult(r ingestResult) {
	rss := ""
	if r.PeakRSSMB > 0 {
		rss = fmt.Sprintf(" peak_rss=%.0fMB", r.PeakRSSMB)
	}
	batch := ""
	if r.BatchMsgs > 0 {
		batch = fmt.Sprintf(" batch=%.0fmsgs/%.1fms", r.BatchMsgs, r.BatchMs)
	}
	if len(r.WithoutIndexes) > 0 {
		batch += " WITHOUT " + strings.Join(r.WithoutIndexes, ",")
	}
	fmt.Printf("RESULT ingest %s/%s/%s/%dB run=%d n=%d secs=%.2f msgs/s=%.0f MB/s=%.1f cpu dlq=%.0f%% rabbit=%.0f%% pg=%.0f%%%s%s (prefill %.1fs)\n",
		r.Mode, r.QueueType, r.DeadLetter, r.Size, r.Run, r.N, r.Secs, r.MsgsSec, r.MBSec, r.CPUDlq, r.CPURabbit, r.CPUPg, rss, batch, r.PrefillSecs)
}

func appendJSON(path string, v any) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = f.Write(append(b, '\n'))
	return err
}

// printIngestSummary prints a markdown table: median, min and max msgs/s
// per body size, with the median run's CPU split.
func printIngestSummary(rs []ingestResult) {
	fmt.Println()
	fmt.Println("| mode | queue | dead letters | body | n | runs | msgs/s median (min–max) | MB/s | CPU dlq / rabbit / pg | peak RSS |")
	fmt.Println("|---|---|---|---|---|---|---|---|---|---|")
	bySize := map[int][]ingestResult{}
	var sizes []int
	for _, r := range rs {
		if _, ok := bySize[r.Size]; !ok {
			sizes = append(sizes, r.Size)
		}
		bySize[r.Size] = append(bySize[r.Size], r)
	}
	for _, s := range sizes {
		g := slices.Clone(bySize[s])
		slices.SortFunc(g, func(a, b ingestResult) int { return cmp.Compare(a.MsgsSec, b.MsgsSec) })
		med := g[len(g)/2]
		rss := "–"
		if med.PeakRSSMB > 0 {
			peak := 0.0
			for _, r := range g {
				peak = max(peak, r.PeakRSSMB)
			}
			rss = fmt.Sprintf("%.0f MB", peak)
		}
		fmt.Printf("| %s | %s | %s | %d B | %d | %d | %.0f (%.0f–%.0f) | %.1f | %.0f%% / %.0f%% / %.0f%% | %s |\n",
			med.Mode, med.QueueType, med.DeadLetter, s, med.N, len(g), med.MsgsSec, g[0].MsgsSec, g[len(g)-1].MsgsSec, med.MBSec,
			med.CPUDlq, med.CPURabbit, med.CPUPg, rss)
	}
}

// ingestRun measures one drain: a fresh schema and queue, n dead letters
// published to the exchange before any consumer runs, then the clock runs
// from starting the consumer until the last of them is committed.
func ingestRun(o ingestOptions, bin string, size, run int) (ingestResult, error) {
	ctx := context.Background()
	suffix := randomHex(4)
	schema := "bench_ingest_" + suffix
	exchange := "bench.ingest.dlx." + suffix
	queue := "bench.ingest.dlq." + suffix
	r := ingestResult{
		Bench: "ingest", Mode: o.mode, QueueType: o.queueType, DeadLetter: o.deadLetter, Size: size, N: o.n, Run: run,
		Consumers: o.ingest.Consumers, Prefetch: o.ingest.Prefetch, BatchSize: o.ingest.BatchSize, Linger: o.ingest.Linger.D().String(),
	}

	// Schema.
	admin, err := pgx.Connect(ctx, o.pgURL)
	if err != nil {
		return r, fmt.Errorf("connect to %s (does database bench exist? `make bench-limits` creates it): %w", o.pgURL, err)
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return r, fmt.Errorf("create schema %s: %w", schema, err)
	}
	dsn, err := withSearchPath(o.pgURL, schema+",public")
	if err != nil {
		return r, err
	}
	maxConns := int32(4 + 2*o.ingest.Consumers)
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: maxConns})
	if err != nil {
		return r, err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return r, err
	}
	for _, ix := range o.withoutIndexes {
		if _, err := admin.Exec(ctx, "DROP INDEX "+pgx.Identifier{schema, ix}.Sanitize()); err != nil {
			return r, fmt.Errorf("-without-index %s: %w", ix, err)
		}
	}
	r.WithoutIndexes = o.withoutIndexes

	// Broker side: dlq's exchange and queue, declared as dlq declares them.
	conn, err := amqp.Dial(o.amqpURL)
	if err != nil {
		return r, fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return r, err
	}
	version, _ := conn.Properties["version"].(string)
	args := broker.OwnQueueArgs(version)
	if o.queueType == "classic" {
		args = amqp.Table{"x-queue-type": "classic"}
	}
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return r, err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return r, err
	}
	if err := ch.QueueBind(queue, "#", exchange, false, nil); err != nil {
		return r, err
	}
	if !o.keep {
		defer func() {
			if c, err := conn.Channel(); err == nil {
				_, _ = c.QueueDelete(queue, false, false, false)
				_ = c.ExchangeDelete(exchange, false, false)
				_ = c.Close()
			}
			_, _ = admin.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
		}()
	}

	// Prefill (not timed).
	t0 := time.Now()
	target, key := exchange, "orders.created"
	stopRejecting := func() error { return nil }
	if o.deadLetter != "direct" {
		source := "bench.ingest.src." + suffix
		srcArgs := amqp.Table{"x-queue-type": "classic", "x-dead-letter-exchange": exchange}
		if o.deadLetter == "ttl" {
			srcArgs["x-message-ttl"] = int32(0)
		}
		if _, err := ch.QueueDeclare(source, true, false, false, false, srcArgs); err != nil {
			return r, fmt.Errorf("declare source queue %s: %w", source, err)
		}
		defer func() {
			if c, err := conn.Channel(); err == nil {
				_, _ = c.QueueDelete(source, false, false, false)
				_ = c.Close()
			}
		}()
		target, key = "", source
		if o.deadLetter == "reject" {
			if stopRejecting, err = rejectAll(conn, source); err != nil {
				return r, err
			}
		}
	}
	if err := prefill(ctx, conn, target, key, o.deadLetter == "direct", o.n, size, suffix); err != nil {
		return r, fmt.Errorf("prefill: %w", err)
	}
	if err := waitReady(conn, queue, o.n, 5*time.Minute); err != nil {
		return r, err
	}
	if err := stopRejecting(); err != nil {
		return r, err
	}
	r.PrefillSecs = time.Since(t0).Seconds()
	// Let the broker and the database settle after the burst.
	if _, err := admin.Exec(ctx, "CHECKPOINT"); err != nil {
		return r, fmt.Errorf("checkpoint: %w", err)
	}

	// A drain returns once everything is committed, with dlq still running
	// (its database backends still alive for the CPU count); stop then
	// shuts it down gracefully.
	var drain func() (dlqCPU, peakRSS float64, stop func() error, err error)
	reg := prometheus.NewRegistry()
	switch o.mode {
	case "inproc":
		drain = func() (float64, float64, func() error, error) {
			return drainInProcess(o, st, reg, exchange, queue, size, run)
		}
	default:
		drain = func() (float64, float64, func() error, error) {
			return drainProcess(o, bin, dsn, exchange, queue, suffix, st)
		}
	}
	c0 := takeCPU()
	start := time.Now()
	dlqCPU, peak, stop, err := drain()
	if err != nil {
		return r, err
	}
	r.Secs = time.Since(start).Seconds()
	c1 := takeCPU()
	if err := stop(); err != nil {
		return r, err
	}
	if o.mode == "inproc" {
		secs, batches := histogram(reg, "dlq_ingest_batch_seconds")
		msgs, _ := histogram(reg, "dlq_ingest_batch_messages")
		if batches > 0 {
			r.BatchMs, r.BatchMsgs = secs/float64(batches)*1000, msgs/float64(batches)
		}
	}
	r.MsgsSec = float64(o.n) / r.Secs
	r.MBSec = float64(o.n) * float64(size) / 1e6 / r.Secs
	r.CPUDlq = dlqCPU / r.Secs * 100
	rmq, pg := c1.since(c0)
	r.CPURabbit = rmq / r.Secs * 100
	r.CPUPg = pg / r.Secs * 100
	r.PeakRSSMB = peak

	// Check the outcome: exactly n rows, nothing left in the queue, ready or
	// unacknowledged (no consumer is attached any more).
	var rows int
	if err := st.Pool().QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&rows); err != nil {
		return r, err
	}
	if rows != o.n {
		return r, fmt.Errorf("stored %d rows for %d dead letters", rows, o.n)
	}
	q, err := passive(conn, queue)
	if err != nil {
		return r, err
	}
	if q.Messages != 0 || q.Consumers != 0 {
		return r, fmt.Errorf("queue %s after the drain: %d ready, %d consumers", queue, q.Messages, q.Consumers)
	}
	return r, nil
}

// storedCount reads the per-queue summary: O(1), unlike count(*), so
// polling it does not load the database being measured.
func storedCount(ctx context.Context, st *store.Store) (int64, error) {
	var n int64
	err := st.Pool().QueryRow(ctx, `SELECT coalesce(sum(messages), 0)::bigint FROM queue_summary`).Scan(&n)
	return n, err
}

// waitStored polls until n dead letters are committed. done closes when
// the consumer stopped early, and why then says why.
func waitStored(st *store.Store, n int, done <-chan struct{}, why func() error) error {
	deadline := time.Now().Add(time.Duration(n/200)*time.Second + 2*time.Minute)
	ctx := context.Background()
	for {
		got, err := storedCount(ctx, st)
		if err == nil && got >= int64(n) {
			return nil
		}
		select {
		case <-done:
			return fmt.Errorf("consumer stopped after %d of %d: %v", got, n, why())
		default:
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("only %d of %d stored by the deadline", got, n)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// drainInProcess runs the consumer exactly as `dlq serve` wires it.
func drainInProcess(o ingestOptions, st *store.Store, reg *prometheus.Registry, exchange, queue string, size, run int) (cpu, rss float64, stop func() error, err error) {
	quiet := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
	conn, err := broker.NewConn(broker.ConnConfig{URL: o.amqpURL, Name: "dlq-bench", Logger: quiet})
	if err != nil {
		return 0, 0, nil, err
	}
	cons, err := consumer.New(consumer.Config{
		Conn: conn, Store: st, Exchange: exchange, Queues: []string{queue},
		Consumers: o.ingest.Consumers, Prefetch: o.ingest.Prefetch, BatchSize: o.ingest.BatchSize,
		BatchBytes: o.ingest.BatchBytes, Linger: o.ingest.Linger.D(),
		Logger: quiet, Registerer: reg,
	})
	if err != nil {
		conn.Close()
		return 0, 0, nil, err
	}
	stopProfile := func() {}
	if o.cpuProfile != "" {
		path := o.cpuProfile
		if run > 1 || size != o.sizes[0] {
			ext := filepath.Ext(path)
			path = fmt.Sprintf("%s-%d-%d%s", strings.TrimSuffix(path, ext), size, run, ext)
		}
		f, err := os.Create(path)
		if err != nil {
			conn.Close()
			return 0, 0, nil, err
		}
		if err := pprof.StartCPUProfile(f); err != nil {
			conn.Close()
			f.Close()
			return 0, 0, nil, err
		}
		stopProfile = func() { pprof.StopCPUProfile(); f.Close() }
	}
	self0 := selfCPU()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = cons.Run(ctx)
	}()
	stop = func() error {
		stopProfile()
		cancel()
		<-done
		conn.Close()
		if runErr != nil {
			return fmt.Errorf("consumer: %w", runErr)
		}
		return nil
	}
	if err := waitStored(st, o.n, done, func() error { return runErr }); err != nil {
		stopProfile()
		cancel()
		conn.Close()
		return 0, 0, nil, err
	}
	return selfCPU() - self0, 0, stop, nil
}

// drainProcess runs `dlq serve` and reads its CPU time and peak memory
// once it drained.
func drainProcess(o ingestOptions, bin, dsn, exchange, queue, suffix string, st *store.Store) (cpu, rss float64, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, nil, err
	}
	addr := ln.Addr().String()
	_ = ln.Close()
	var env []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			env = append(env, kv)
		}
	}
	control := "bench.ingest.control." + suffix
	env = append(env,
		"DLQ_DATABASE_URL="+dsn, "DLQ_AMQP_URL="+o.amqpURL, "DLQ_EXCHANGE="+exchange, "DLQ_QUEUES="+queue,
		"DLQ_CONTROL_QUEUE="+control, "DLQ_HTTP_ADDR="+addr, "DLQ_LOG_LEVEL=warn",
		"DLQ_CONSUMERS="+strconv.Itoa(o.ingest.Consumers), "DLQ_PREFETCH="+strconv.Itoa(o.ingest.Prefetch),
		"DLQ_BATCH_SIZE="+strconv.Itoa(o.ingest.BatchSize),
	)
	cmd := exec.Command(bin, "serve", "--no-migrate")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, nil, err
	}
	exited := make(chan struct{})
	var waitErr error
	go func() {
		defer close(exited)
		waitErr = cmd.Wait()
	}()
	stop = func() error {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		var err error
		select {
		case <-exited:
			if waitErr != nil {
				err = fmt.Errorf("dlq serve exited after SIGTERM: %w", waitErr)
			}
		case <-time.After(60 * time.Second):
			_ = cmd.Process.Kill()
			<-exited
			err = errors.New("dlq serve did not exit within 60s of SIGTERM")
		}
		// The control queue is dlq's; remove it with the rest.
		if c, derr := amqp.Dial(o.amqpURL); derr == nil {
			if ch, derr := c.Channel(); derr == nil {
				_, _ = ch.QueueDelete(control, false, false, false)
			}
			_ = c.Close()
		}
		return err
	}
	if err := waitStored(st, o.n, exited, func() error { return waitErr }); err != nil {
		_ = stop()
		return 0, 0, nil, err
	}
	// Read while the process lives: /proc/<pid> goes with it.
	pid := cmd.Process.Pid
	cpu, err = procCPU(pid)
	if err == nil {
		rss, err = procStatusKB(pid, "VmHWM")
	}
	if err != nil {
		_ = stop()
		return 0, 0, nil, err
	}
	return cpu, rss / 1024, stop, nil
}

// rejectAll consumes queue on a channel of its own and rejects every
// message without requeueing, which makes RabbitMQ dead-letter it. stop
// cancels the consumer.
func rejectAll(conn *amqp.Connection, queue string) (stop func() error, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		return nil, err
	}
	ds, err := ch.Consume(queue, "bench-rejecter", false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume source queue %s: %w", queue, err)
	}
	done := make(chan error, 1)
	go func() {
		// One multiple-reject per 500 deliveries (or after 20ms without
		// more) keeps the rejecter from being the prefill's bottleneck.
		var last *amqp.Delivery
		held := 0
		flush := func() error {
			if last == nil {
				return nil
			}
			err := last.Nack(true, false)
			last, held = nil, 0
			return err
		}
		idle := time.NewTicker(20 * time.Millisecond)
		defer idle.Stop()
		for {
			select {
			case d, ok := <-ds:
				if !ok {
					done <- flush()
					return
				}
				last = &d
				if held++; held < 500 {
					continue
				}
			case <-idle.C:
			}
			if err := flush(); err != nil {
				done <- fmt.Errorf("reject: %w", err)
				return
			}
		}
	}()
	return func() error {
		defer ch.Close()
		if err := ch.Cancel("bench-rejecter", false); err != nil {
			return err
		}
		return <-done
	}, nil
}

// prefill publishes n messages with publisher confirms and typical
// application headers: straight to dlq's exchange as dead letters, with the
// headers RabbitMQ writes when it dead-letters (two x-death entries, as
// after a retry queue, and x-first-death-*) when withDeath, else to a
// source queue where RabbitMQ dead-letters them.
func prefill(ctx context.Context, conn *amqp.Connection, exchange, key string, withDeath bool, n, size int, runID string) error {
	return prefillQueues(ctx, conn, exchange, key, withDeath, n, size, runID, 1)
}

// prefillQueues is prefill with the death record naming one of queues
// source queues in turn (orders.process.0, .1, ...; orders.process when
// queues is 1), so that a benchmark can replay them as separate tasks.
func prefillQueues(ctx context.Context, conn *amqp.Connection, exchange, key string, withDeath bool, n, size int, runID string, queues int) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = make([]byte, size)
		_, _ = crand.Read(bodies[i])
	}
	now := time.Now().UTC().Truncate(time.Second)
	const window = 2000
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	settle := func() error {
		for _, dc := range pending {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("publish nacked")
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := 0; i < n; i++ {
		id := fmt.Sprintf("bench-%s-%08d", runID, i)
		body := bodies[i%len(bodies)]
		h := amqp.Table{
			"x-correlation-id":    id,
			"x-tenant":            "acme-" + strconv.Itoa(i%50),
			"x-retry-count":       int32(3),
			"x-exception-type":    "OrderValidationError",
			"x-exception-message": "order total does not match its lines",
			"traceparent":         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		}
		if withDeath {
			source := "orders.process"
			if queues > 1 {
				source += "." + strconv.Itoa(i%queues)
			}
			h["x-death"] = []any{
				amqp.Table{"count": int64(3), "reason": "rejected", "queue": source, "time": now,
					"exchange": "orders", "routing-keys": []any{"orders.created"}},
				amqp.Table{"count": int64(2), "reason": "expired", "queue": "orders.retry", "time": now.Add(-time.Minute),
					"exchange": "orders.retry", "routing-keys": []any{"orders.created"}, "original-expiration": "10000"},
			}
			h["x-first-death-reason"] = "expired"
			h["x-first-death-queue"] = "orders.retry"
			h["x-first-death-exchange"] = "orders.retry"
		}
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, CorrelationId: id,
			Timestamp: now, AppId: "orders-service", Type: "order.created", Headers: h, Body: body,
		})
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		if len(pending) == window {
			if err := settle(); err != nil {
				return err
			}
		}
	}
	return settle()
}

func passive(conn *amqp.Connection, queue string) (amqp.Queue, error) {
	ch, err := conn.Channel()
	if err != nil {
		return amqp.Queue{}, err
	}
	defer ch.Close()
	return ch.QueueDeclarePassive(queue, true, false, false, false, nil)
}

func waitReady(conn *amqp.Connection, queue string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		q, err := passive(conn, queue)
		if err != nil {
			return err
		}
		if q.Messages >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %s holds %d of %d after %s", queue, q.Messages, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func withSearchPath(dsn, path string) (string, error) {
	u, err := url.Parse(dsn)
	if err != nil {
		return "", fmt.Errorf("-pg must be a postgres:// URL: %w", err)
	}
	q := u.Query()
	q.Set("search_path", path)
	u.RawQuery = q.Encode()
	return u.String(), nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = crand.Read(b)
	return hex.EncodeToString(b)
}

// procStatusKB reads a "Name: N kB" line of /proc/<pid>/status.
func procStatusKB(pid int, name string) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, name+":"); ok {
			f := strings.Fields(v)
			if len(f) == 0 {
				break
			}
			return strconv.ParseFloat(f[0], 64)
		}
	}
	return 0, fmt.Errorf("no %s in /proc/%d/status", name, pid)
}

// CPU accounting, as bench-limits does it: user+system seconds of this
// process (getrusage), of the dlq subprocess (/proc/<pid>/stat), and of
// every process owned by the rabbitmq and postgres users, sampled before
// and after the drain while its connections are open.

const clkTck = 100.0 // getconf CLK_TCK on Linux

// cpuSnap holds the CPU seconds of the RabbitMQ and PostgreSQL processes:
// totals, and by pid. Prefer since over subtracting totals: a process that
// exits between two snapshots (a backend of another client on a shared
// machine) takes its seconds with it and can make a total's difference
// negative. (The helpers in this file are shared by the package's other
// benchmarks: keep their signatures.)
type cpuSnap struct {
	rmqSec, pgSec float64
	rmq, pg       map[int]float64
}

// since returns the CPU seconds RabbitMQ and PostgreSQL used since s0:
// the growth of processes in both snapshots plus all of new ones.
func (s cpuSnap) since(s0 cpuSnap) (rmq, pg float64) {
	diff := func(now, before map[int]float64) float64 {
		var sum float64
		for pid, sec := range now {
			sum += max(sec-before[pid], 0)
		}
		return sum
	}
	return diff(s.rmq, s0.rmq), diff(s.pg, s0.pg)
}

var rmqUID, pgUID = ^uint32(0), ^uint32(0)

func initCPU() {
	for name, dst := range map[string]*uint32{"rabbitmq": &rmqUID, "postgres": &pgUID} {
		u, err := user.Lookup(name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "warning: no %s user, its CPU is not counted: %v\n", name, err)
			continue
		}
		v, _ := strconv.Atoi(u.Uid)
		*dst = uint32(v)
	}
}

func selfCPU() float64 {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Sec) + float64(ru.Utime.Usec)/1e6 + float64(ru.Stime.Sec) + float64(ru.Stime.Usec)/1e6
}

// procCPU returns the user+system seconds of process pid.
func procCPU(pid int) (float64, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	s := string(b)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return 0, fmt.Errorf("unreadable /proc/%d/stat", pid)
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return 0, fmt.Errorf("short /proc/%d/stat", pid)
	}
	ut, _ := strconv.ParseFloat(f[11], 64)
	st, _ := strconv.ParseFloat(f[12], 64)
	return (ut + st) / clkTck, nil
}

func takeCPU() cpuSnap {
	s := cpuSnap{rmq: map[int]float64{}, pg: map[int]float64{}}
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, d := range dirs {
		fi, err := os.Stat(d)
		if err != nil {
			continue
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok || (st.Uid != rmqUID && st.Uid != pgUID) {
			continue
		}
		pid, err := strconv.Atoi(filepath.Base(d))
		if err != nil {
			continue
		}
		sec, err := procCPU(pid)
		if err != nil {
			continue
		}
		if st.Uid == rmqUID {
			s.rmq[pid] = sec
			s.rmqSec += sec
		} else {
			s.pg[pid] = sec
			s.pgSec += sec
		}
	}
	return s
}

// histogram returns the sum and count of a histogram in reg.
func histogram(reg *prometheus.Registry, name string) (float64, uint64) {
	mfs, err := reg.Gather()
	if err != nil {
		return 0, 0
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			if h := m.GetHistogram(); h != nil {
				return h.GetSampleSum(), h.GetSampleCount()
			}
		}
	}
	return 0, 0
}
