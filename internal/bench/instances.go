package bench

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// instancesOptions are the flags of `dlq-bench instances`.
type instancesOptions struct {
	n, size, runs, tasks int
	counts               []int
	amqpURL, pgURL, out  string
	// cpu measures RabbitMQ's and PostgreSQL's CPU time.
	cpu cpuMeter
}

// instancesResult is one measured run with k `dlq serve` instances.
type instancesResult struct {
	Bench     string `json:"bench"`
	Instances int    `json:"instances"`
	N         int    `json:"n"`
	Size      int    `json:"size"`
	Run       int    `json:"run"`
	// Ingest: from starting the instances until the last of N prefilled
	// dead letters is committed.
	IngestSecs    float64 `json:"ingest_secs"`
	IngestMsgsSec float64 `json:"ingest_msgs_per_s"`
	// Replay: Tasks tasks over the N rows (one per source queue), from the
	// first request until the last task completed.
	Tasks         int     `json:"tasks"`
	ReplaySecs    float64 `json:"replay_secs"`
	ReplayMsgsSec float64 `json:"replay_msgs_per_s"`
	// Runners counts the tasks each instance ran (seen in its metrics).
	Runners []int `json:"runners"`
	// CPU in percent of one core: every dlq instance together, RabbitMQ,
	// PostgreSQL.
	IngestCPU [3]float64 `json:"ingest_cpu_dlq_rabbit_pg_pct"`
	ReplayCPU [3]float64 `json:"replay_cpu_dlq_rabbit_pg_pct"`
}

const benchAdminToken = "dlq-bench-instances-token"

// benchInstances measures ingest and replay with 1, 2 and 3 `dlq serve`
// processes on one database and one queue.
// Instances runs `dlq-bench instances`.
func Instances(args []string) error {
	o := instancesOptions{}
	fs := flag.NewFlagSet("dlq-bench instances", flag.ContinueOnError)
	fs.IntVar(&o.n, "n", 100_000, "dead letters per run, ingested and then replayed")
	fs.IntVar(&o.size, "size", 1024, "body size in bytes")
	fs.IntVar(&o.runs, "runs", 1, "runs of every instance count, interleaved; the summary shows the median")
	fs.IntVar(&o.tasks, "tasks", 3, "replay tasks the rows are split into (by source queue), so that instances can share the work")
	counts := fs.String("instances", "1,2,3", "instance counts to measure, comma list")
	fs.StringVar(&o.amqpURL, "amqp", cmp.Or(os.Getenv("DLQ_AMQP_URL"), config.AMQPURLDefault), "RabbitMQ URL")
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"),
		"PostgreSQL database; each run gets a fresh schema in it")
	fs.StringVar(&o.out, "out", "", "append each result as a JSON line to this file")
	if err := fs.Parse(args); err != nil {
		return err
	}
	for _, c := range splitList(*counts) {
		k, err := strconv.Atoi(c)
		if err != nil || k < 1 || k > 16 {
			return fmt.Errorf("-instances: %q is not a count from 1 to 16", c)
		}
		o.counts = append(o.counts, k)
	}
	if o.n < 1 || o.size < 16 || o.runs < 1 || o.tasks < 1 || len(o.counts) == 0 {
		return errors.New("-n, -runs and -tasks must be >= 1, -size >= 16, and -instances must name a count")
	}
	bin, clean, err := buildDlq()
	if err != nil {
		return err
	}
	defer clean()
	o.cpu = newCPUMeter()
	fmt.Printf("instances benchmark: n=%d size=%d instances=%v runs=%d tasks=%d\n", o.n, o.size, o.counts, o.runs, o.tasks)
	var all []instancesResult
	for run := 1; run <= o.runs; run++ {
		for _, k := range o.counts {
			r, err := instancesRun(o, bin, k, run)
			if err != nil {
				return fmt.Errorf("%d instances, run %d: %w", k, run, err)
			}
			fmt.Printf("RESULT instances=%d run=%d ingest %.0f msgs/s (%.1fs, cpu dlq %.0f%% rabbit %.0f%% pg %.0f%%) replay %.0f msgs/s (%.1fs, cpu dlq %.0f%% rabbit %.0f%% pg %.0f%%, tasks per instance %v)\n",
				k, run, r.IngestMsgsSec, r.IngestSecs, r.IngestCPU[0], r.IngestCPU[1], r.IngestCPU[2],
				r.ReplayMsgsSec, r.ReplaySecs, r.ReplayCPU[0], r.ReplayCPU[1], r.ReplayCPU[2], r.Runners)
			if o.out != "" {
				if err := appendJSON(o.out, r); err != nil {
					return err
				}
			}
			all = append(all, r)
		}
	}
	printInstancesSummary(o, all)
	return nil
}

func printInstancesSummary(o instancesOptions, rs []instancesResult) {
	fmt.Println()
	fmt.Println("| instances | ingest msgs/s median (min–max) | CPU dlq / rabbit / pg | replay msgs/s median (min–max) | CPU dlq / rabbit / pg | tasks per instance |")
	fmt.Println("|---|---|---|---|---|---|")
	for _, k := range o.counts {
		var g []instancesResult
		for _, r := range rs {
			if r.Instances == k {
				g = append(g, r)
			}
		}
		in := slices.Clone(g)
		slices.SortFunc(in, func(a, b instancesResult) int { return cmp.Compare(a.IngestMsgsSec, b.IngestMsgsSec) })
		re := slices.Clone(g)
		slices.SortFunc(re, func(a, b instancesResult) int { return cmp.Compare(a.ReplayMsgsSec, b.ReplayMsgsSec) })
		mi, mr := in[len(in)/2], re[len(re)/2]
		fmt.Printf("| %d | %.0f (%.0f–%.0f) | %.0f%% / %.0f%% / %.0f%% | %.0f (%.0f–%.0f) | %.0f%% / %.0f%% / %.0f%% | %v |\n",
			k, mi.IngestMsgsSec, in[0].IngestMsgsSec, in[len(in)-1].IngestMsgsSec, mi.IngestCPU[0], mi.IngestCPU[1], mi.IngestCPU[2],
			mr.ReplayMsgsSec, re[0].ReplayMsgsSec, re[len(re)-1].ReplayMsgsSec, mr.ReplayCPU[0], mr.ReplayCPU[1], mr.ReplayCPU[2], mr.Runners)
	}
}

// instancesRun measures one run: a fresh schema and queue, N dead letters
// prefilled, k instances started and timed until all are stored, then
// the replay tasks timed until all completed.
func instancesRun(o instancesOptions, bin string, k, run int) (instancesResult, error) {
	ctx := context.Background()
	r := instancesResult{Bench: "instances", Instances: k, N: o.n, Size: o.size, Run: run, Tasks: o.tasks, Runners: make([]int, k)}
	env := &instancesEnv{suffix: randomHex(4)}
	defer env.undo.run()
	if err := env.setUp(ctx, o); err != nil {
		return r, err
	}
	procs, err := env.ingest(o, bin, k, &r)
	if err != nil {
		return r, err
	}
	defer procs.stop()
	if err := env.replay(o, procs, &r); err != nil {
		return r, err
	}
	if err := procs.stop(); err != nil {
		return r, err
	}
	q, err := passive(env.conn, env.target)
	if err != nil {
		return r, err
	}
	if q.Messages != o.n {
		return r, fmt.Errorf("target queue holds %d messages, want %d", q.Messages, o.n)
	}
	return r, nil
}

// instancesEnv is one run's schema, store, queues and connection, and what
// undoes them.
type instancesEnv struct {
	suffix, dsn                      string
	exchange, queue, control, target string
	st                               *store.Store
	conn                             *amqp.Connection
	// ingestCPU is the instances' CPU seconds when ingest ended.
	ingestCPU float64
	undo      undoStack
}

// setUp makes the migrated schema, dlq's exchange and queue and the replay
// target, prefills N dead letters and lets the database settle.
func (e *instancesEnv) setUp(ctx context.Context, o instancesOptions) error {
	e.exchange, e.queue = "bench.instances.dlx."+e.suffix, "bench.instances.dlq."+e.suffix
	e.control, e.target = "bench.instances.control."+e.suffix, "bench.instances.target."+e.suffix
	admin, dsn, dropSchema, err := runSchema(ctx, o.pgURL, "bench_instances_"+e.suffix, false)
	if err != nil {
		return err
	}
	e.undo.push(dropSchema)
	e.dsn = dsn
	if e.st, err = store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4}); err != nil {
		return err
	}
	e.undo.push(e.st.Close)
	if _, err := e.st.Migrate(ctx, nil); err != nil {
		return err
	}

	conn, ch, err := dialDLQ(o.amqpURL, e.exchange, e.queue, "")
	if err != nil {
		return err
	}
	e.conn = conn
	e.undo.push(func() { _ = conn.Close() })
	if _, err := ch.QueueDeclare(e.target, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return err
	}
	e.undo.push(func() {
		if c, err := conn.Channel(); err == nil {
			for _, q := range []string{e.queue, e.target, e.control} {
				_, _ = c.QueueDelete(q, false, false, false)
			}
			_ = c.ExchangeDelete(e.exchange, false, false)
			_ = c.Close()
		}
	})
	if err := prefillQueues(ctx, conn, e.exchange, "orders.created", true, o.n, o.size, e.suffix, o.tasks, false); err != nil {
		return fmt.Errorf("prefill: %w", err)
	}
	if err := waitReady(conn, e.queue, o.n, 5*time.Minute); err != nil {
		return err
	}
	return admin.Checkpoint(ctx)
}

// ingest starts k instances and times them until every dead letter is
// stored; the caller stops the instances it returns.
func (e *instancesEnv) ingest(o instancesOptions, bin string, k int, r *instancesResult) (*instances, error) {
	env := map[string]string{
		"DLQ_DATABASE_URL": e.dsn, "DLQ_AMQP_URL": o.amqpURL, "DLQ_EXCHANGE": e.exchange, "DLQ_QUEUES": e.queue,
		"DLQ_CONTROL_QUEUE": e.control, "DLQ_LOG_LEVEL": "warn", "DLQ_ADMIN_TOKEN": benchAdminToken,
		"DLQ_REPLAY_POLL_INTERVAL": "50ms",
		// The benchmark polls its tasks' progress faster than an operator.
		"DLQ_API_RATE": "1000", "DLQ_API_BURST": "1000",
		// Enough tasks per instance for the instances together to run
		// them all at once.
		"DLQ_REPLAY_MAX_TASKS": strconv.Itoa((o.tasks + k - 1) / k),
	}
	c0, start := o.cpu.take(), time.Now()
	procs, err := startInstances(bin, k, env)
	if err != nil {
		return nil, err
	}
	if err := waitStored(e.st, o.n, procs.exited, procs.why); err != nil {
		_ = procs.stop()
		return nil, err
	}
	r.IngestSecs = time.Since(start).Seconds()
	c1 := o.cpu.take()
	e.ingestCPU = procs.cpu()
	r.IngestMsgsSec = float64(o.n) / r.IngestSecs
	rmq, pg := c1.since(c0)
	r.IngestCPU = [3]float64{e.ingestCPU / r.IngestSecs * 100, rmq / r.IngestSecs * 100, pg / r.IngestSecs * 100}
	return procs, nil
}

// replay asks the first instance for one task per source queue and times
// them until all completed, counting which instance ran each.
func (e *instancesEnv) replay(o instancesOptions, procs *instances, r *instancesResult) error {
	for i := range r.Instances {
		if err := procs.waitReady(i, time.Minute); err != nil {
			return err
		}
	}
	c0, start := o.cpu.take(), time.Now()
	var ids []int64
	for q := range o.tasks {
		source := "orders.process"
		if o.tasks > 1 {
			source += "." + strconv.Itoa(q)
		}
		var task replay.Task
		if err := procs.api(0, "POST", "/api/v1/replays", map[string]any{
			"filter": map[string]any{"source_queue": source}, "confirm": true,
			"target": map[string]any{"exchange": "", "routing_key": e.target},
		}, &task); err != nil {
			return err
		}
		ids = append(ids, task.ID)
	}
	ran, published, err := waitTasks(procs, ids, 10*time.Minute)
	if err != nil {
		return err
	}
	r.ReplaySecs = time.Since(start).Seconds()
	c1, cpu := o.cpu.take(), procs.cpu()
	r.ReplayMsgsSec = float64(o.n) / r.ReplaySecs
	rmq, pg := c1.since(c0)
	r.ReplayCPU = [3]float64{(cpu - e.ingestCPU) / r.ReplaySecs * 100, rmq / r.ReplaySecs * 100, pg / r.ReplaySecs * 100}
	for _, i := range ran {
		r.Runners[i]++
	}
	if published != int64(o.n) {
		return fmt.Errorf("the tasks published %d of %d", published, o.n)
	}
	return nil
}

// waitTasks polls the tasks through the first instance until every one
// completed (any other end is an error) or limit passes; it returns the
// instance that ran each task and what they published.
func waitTasks(procs *instances, ids []int64, limit time.Duration) (ran map[int64]int, published int64, err error) {
	deadline := time.Now().Add(limit)
	ran = map[int64]int{}
	for done := 0; done < len(ids); {
		done, published = 0, 0
		for _, id := range ids {
			if _, ok := ran[id]; !ok {
				if i := procs.runner(id); i >= 0 {
					ran[id] = i
				}
			}
			var task replay.Task
			if err := procs.api(0, "GET", fmt.Sprintf("/api/v1/replays/%d", id), nil, &task); err != nil {
				return ran, published, err
			}
			if store.TaskFinished(task.Status) {
				if task.Status != replay.StatusCompleted {
					return ran, published, fmt.Errorf("task %d ended %s: %+v", id, task.Status, task)
				}
				done++
				published += task.Published
			}
		}
		if time.Now().After(deadline) {
			return ran, published, fmt.Errorf("replay tasks %v not finished after %s", ids, limit)
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ran, published, nil
}

// instances are running `dlq serve` processes.
type instances struct {
	cmds  []*exec.Cmd
	addrs []string
	// done closes, per instance, once it has exited.
	done []chan struct{}
	// exited closes when any instance exits; why says how.
	exited  chan struct{}
	waitErr error
	stopped bool
}

func startInstances(bin string, k int, env map[string]string) (*instances, error) {
	p := &instances{}
	var base []string
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "DLQ_") {
			base = append(base, kv)
		}
	}
	for key, val := range env {
		base = append(base, key+"="+val)
	}
	exited := make(chan error, k)
	p.exited = make(chan struct{})
	for i := range k {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		addr := ln.Addr().String()
		_ = ln.Close()
		cmd := exec.Command(bin, "serve", "--no-migrate")
		cmd.Env = append(slices.Clip(base), "DLQ_HTTP_ADDR="+addr, fmt.Sprintf("DLQ_INSTANCE=bench-%d", i))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Start(); err != nil {
			_ = p.stop()
			return nil, err
		}
		done := make(chan struct{})
		p.cmds, p.addrs, p.done = append(p.cmds, cmd), append(p.addrs, addr), append(p.done, done)
		go func() {
			err := cmd.Wait()
			close(done)
			exited <- fmt.Errorf("instance %d exited: %v", i, err)
		}()
	}
	go func() {
		p.waitErr = <-exited
		close(p.exited)
	}()
	return p, nil
}

func (p *instances) why() error { return p.waitErr }

// cpu returns the CPU seconds of every instance so far.
func (p *instances) cpu() float64 {
	var sum float64
	for _, cmd := range p.cmds {
		if sec, err := procCPU(cmd.Process.Pid); err == nil {
			sum += sec
		}
	}
	return sum
}

// stop stops every instance with SIGTERM (once).
func (p *instances) stop() error {
	if p.stopped {
		return nil
	}
	p.stopped = true
	var errs []error
	for _, cmd := range p.cmds {
		_ = cmd.Process.Signal(syscall.SIGTERM)
	}
	deadline := time.After(time.Minute)
	for i, cmd := range p.cmds {
		select {
		case <-p.done[i]:
		case <-deadline:
			_ = cmd.Process.Kill()
			<-p.done[i]
			errs = append(errs, fmt.Errorf("instance %d did not stop within a minute of SIGTERM", i))
		}
	}
	return errors.Join(errs...)
}

func (p *instances) waitReady(i int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		resp, err := http.Get("http://" + p.addrs[i] + "/readyz")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("instance %d not ready after %s", i, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// api sends a request with the admin token to instance i and decodes a
// 2xx JSON answer into out.
func (p *instances) api(i int, method, path string, body, out any) error {
	var rd io.Reader
	if body != nil {
		b, err := json.Marshal(body)
		if err != nil {
			return err
		}
		rd = bytes.NewReader(b)
	}
	req, err := http.NewRequest(method, "http://"+p.addrs[i]+path, rd)
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+benchAdminToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode >= 300 {
		return fmt.Errorf("%s %s answered %d: %s", method, path, resp.StatusCode, b)
	}
	return json.Unmarshal(b, out)
}

// runner returns the instance whose metrics show task id's progress, or
// -1.
func (p *instances) runner(id int64) int {
	sample := fmt.Sprintf(`dlq_replay_task_messages{state="requested",task="%d"}`, id)
	for i, addr := range p.addrs {
		resp, err := http.Get("http://" + addr + "/metrics")
		if err != nil {
			continue
		}
		b, err := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		if err == nil && bytes.Contains(b, []byte(sample)) {
			return i
		}
	}
	return -1
}
