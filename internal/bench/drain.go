package bench

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/store"
	"github.com/dlq/dlq/textindex"
)

// The timed part of the ingest benchmark: dlq draining the prefilled
// queue, in this process or as a dlq serve subprocess.

// waitStored polls until n dead letters are committed. done closes when
// the consumer stopped early, and why then says why.
func waitStored(st *store.Store, n int, done <-chan struct{}, why func() error) error {
	deadline := time.Now().Add(time.Duration(n/200)*time.Second + 2*time.Minute)
	ctx := context.Background()
	for {
		got, err := st.Bench().SummaryCount(ctx)
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
	// The default failure category rules, as dlq serve's default
	// configuration has them.
	def := config.Default()
	categories, err := def.CategoryRules()
	if err != nil {
		conn.Close()
		return 0, 0, nil, err
	}
	cons, err := consumer.New(consumer.Config{
		Conn: conn, Store: st, Exchange: exchange, Queues: []string{queue},
		Consumers: o.ingest.Consumers, Prefetch: o.ingest.Prefetch, BatchSize: o.ingest.BatchSize,
		BatchBytes: o.ingest.BatchBytes, Linger: o.ingest.Linger.D(),
		Logger: quiet, Registerer: reg, Categories: categories,
	})
	if err != nil {
		conn.Close()
		return 0, 0, nil, err
	}
	stopProfile, err := startProfiles(o, size, run)
	if err != nil {
		conn.Close()
		return 0, 0, nil, err
	}
	// The text indexer, as dlq serve runs it with text search on.
	var indexer *textindex.Indexer
	if st.TextSearch() {
		if indexer, err = textindex.New(textindex.Config{Store: st, Duty: o.ingest.TextIndexDuty, Logger: quiet, Registerer: reg}); err != nil {
			stopProfile()
			conn.Close()
			return 0, 0, nil, err
		}
	}
	self0 := selfCPU()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	indexDone := make(chan struct{})
	var runErr error
	go func() {
		defer close(done)
		runErr = cons.Run(ctx)
	}()
	go func() {
		defer close(indexDone)
		if indexer != nil {
			_ = indexer.Run(ctx)
		}
	}()
	stop = func() error {
		stopProfile()
		cancel()
		<-done
		<-indexDone
		conn.Close()
		if runErr != nil {
			return fmt.Errorf("consumer: %w", runErr)
		}
		return nil
	}
	if err := waitStored(st, o.n, done, func() error { return runErr }); err != nil {
		stopProfile()
		cancel()
		<-indexDone
		conn.Close()
		return 0, 0, nil, err
	}
	return selfCPU() - self0, 0, stop, nil
}

// profilePath is the profile file of a run: the flag's value for the
// first, with -<size>-<run> before the extension for the others.
func profilePath(flagValue string, o ingestOptions, size, run int) string {
	if run > 1 || size != o.sizes[0] {
		ext := filepath.Ext(flagValue)
		return fmt.Sprintf("%s-%d-%d%s", strings.TrimSuffix(flagValue, ext), size, run, ext)
	}
	return flagValue
}

// startProfiles starts the CPU profile (-cpuprofile) and perf's sampling
// of the machine (-pgprofile), and writes the
// allocations so far to <memprofile>.base (-memprofile); the returned stop
// ends the CPU profile and writes the allocations after the drain, so
// `go tool pprof -base <file>.base <file>` shows the drain's alone (the
// prefill ran in this process too). stop runs once however often called.
func startProfiles(o ingestOptions, size, run int) (stop func(), err error) {
	var cpuFile *os.File
	if o.cpuProfile != "" {
		if cpuFile, err = os.Create(profilePath(o.cpuProfile, o, size, run)); err != nil {
			return nil, err
		}
		if err := pprof.StartCPUProfile(cpuFile); err != nil {
			cpuFile.Close()
			return nil, err
		}
	}
	var memPath string
	if o.memProfile != "" {
		memPath = profilePath(o.memProfile, o, size, run)
		if err := writeAllocs(memPath + ".base"); err != nil {
			if cpuFile != nil {
				pprof.StopCPUProfile()
				cpuFile.Close()
			}
			return nil, err
		}
	}
	var stopPerf func() error
	if o.pgProfile != "" {
		if stopPerf, err = startPerf(profilePath(o.pgProfile, o, size, run)); err != nil {
			if cpuFile != nil {
				pprof.StopCPUProfile()
				cpuFile.Close()
			}
			return nil, err
		}
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			if stopPerf != nil {
				if err := stopPerf(); err != nil {
					fmt.Fprintf(os.Stderr, "warning: -pgprofile: %v\n", err)
				}
			}
			if cpuFile != nil {
				pprof.StopCPUProfile()
				cpuFile.Close()
			}
			if memPath != "" {
				if err := writeAllocs(memPath); err != nil {
					fmt.Fprintf(os.Stderr, "warning: -memprofile: %v\n", err)
				}
			}
		})
	}, nil
}

// writeAllocs writes the allocation profile (every allocation since the
// start, sampled) to path. The profile stands as of the last collection,
// so one runs first: without it the allocations since the previous one
// (hundreds of MB with dlq serve's GOGC) would be missing.
func writeAllocs(path string) error {
	runtime.GC()
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("write allocation profile %s: %w", path, err)
	}
	return f.Close()
}

// drainProcess runs `dlq serve` and reads its CPU time and peak memory
// once it drained.
//
// subscribed is when dlq's first consumer was on the queue (seen on watch,
// a connection opened before the clock started): the raw
// program's clock starts at its subscription, after it connected, so the
// drain from there is the like-for-like figure, and the time before it is
// dlq's start-up.
func drainProcess(o ingestOptions, bin, dsn, exchange, queue, suffix, keyEntry string, st *store.Store, watch *amqp.Connection) (cpu, rss float64, subscribed time.Time, stop func() error, err error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, 0, time.Time{}, nil, err
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
		"DLQ_SEARCH_TEXT="+strconv.FormatBool(o.ingest.TextSearch),
	)
	if keyEntry != "" {
		env = append(env, "DLQ_ENCRYPTION_KEYS="+keyEntry)
	}
	cmd := exec.Command(bin, "serve", "--no-migrate")
	cmd.Env = env
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Start(); err != nil {
		return 0, 0, time.Time{}, nil, err
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
	sub := make(chan time.Time, 1)
	go func() { sub <- firstConsumer(watch, queue, exited) }()
	if err := waitStored(st, o.n, exited, func() error { return waitErr }); err != nil {
		_ = stop()
		return 0, 0, time.Time{}, nil, err
	}
	subscribed = <-sub
	// Read while the process lives: /proc/<pid> goes with it.
	pid := cmd.Process.Pid
	cpu, err = procCPU(pid)
	if err == nil {
		rss, err = procStatusKB(pid, "VmHWM")
	}
	if err != nil {
		_ = stop()
		return 0, 0, time.Time{}, nil, err
	}
	return cpu, rss / 1024, subscribed, stop, nil
}

// firstConsumer polls the queue's consumer count every millisecond until
// it is above zero and returns when that was seen (zero time if the
// process exited or 30 s passed first).
func firstConsumer(conn *amqp.Connection, queue string, exited <-chan struct{}) time.Time {
	ch, err := conn.Channel()
	if err != nil {
		return time.Time{}
	}
	defer ch.Close()
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
		if err != nil {
			return time.Time{}
		}
		if q.Consumers > 0 {
			return time.Now()
		}
		select {
		case <-exited:
			return time.Time{}
		case <-time.After(time.Millisecond):
		}
	}
	return time.Time{}
}
