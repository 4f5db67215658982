package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// The end-to-end replay (`dlq-bench replay -mode e2e`): what an operator
// sees with the whole of `dlq serve` running. Messages are dead-lettered
// by RabbitMQ from a source queue of -queue-type, a `dlq serve` process
// ingests them, and a replay of all of them to their source is then asked
// for through the control queue. The clock runs from sending the command
// until the task is completed (every message published and confirmed,
// every row settled); the source queue must then hold exactly -n.

// buildDlq builds the dlq binary into a temporary folder; clean removes it.
func buildDlq() (bin string, clean func(), err error) {
	dir, err := os.MkdirTemp("", "dlq-bench-")
	if err != nil {
		return "", nil, err
	}
	bin = filepath.Join(dir, "dlq")
	build := exec.Command("go", "build", "-o", bin, "github.com/dlq/dlq/cmd/dlq")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("build dlq: %w", err)
	}
	return bin, func() { _ = os.RemoveAll(dir) }, nil
}

func replayE2E(o replayOptions, bin string, run int) (replayResult, error) {
	ctx := context.Background()
	res := replayResult{Bench: "replay", Mode: modeE2E, N: o.n, Size: o.size, Run: run, Batch: o.batch, Window: o.window, QueueType: o.queueType}
	suffix := randomHex(4)
	schema := "dlqbench_e2e_" + suffix
	exchange, queue := "bench.e2e.dlx."+suffix, "bench.e2e.dlq."+suffix
	source, controlQueue := "bench.e2e.src."+suffix, "bench.e2e.control."+suffix

	admin, dsn, dropSchema, err := runSchema(ctx, o.pgURL, schema, o.keep)
	if err != nil {
		return res, err
	}
	defer dropSchema()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2})
	if err != nil {
		return res, err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return res, err
	}

	// Broker: dlq's exchange and queue as dlq declares them, and a source
	// queue of the measured type that dead-letters to the exchange.
	conn, err := amqp.Dial(o.amqpURL)
	if err != nil {
		return res, fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return res, err
	}
	version, _ := conn.Properties["version"].(string)
	if err := declareDLQ(ch, exchange, queue, broker.OwnQueueArgs(version)); err != nil {
		return res, err
	}
	srcArgs := amqp.Table{"x-queue-type": o.queueType, "x-dead-letter-exchange": exchange}
	if _, err := ch.QueueDeclare(source, true, false, false, false, srcArgs); err != nil {
		return res, fmt.Errorf("declare source queue %s: %w", source, err)
	}
	if !o.keep {
		defer func() {
			if c, err := conn.Channel(); err == nil {
				for _, q := range []string{source, queue, controlQueue} {
					_, _ = c.QueueDelete(q, false, false, false)
				}
				_ = c.ExchangeDelete(exchange, false, false)
				_ = c.Close()
			}
		}()
	}

	// Dead letters, fresh: published to the source and rejected there, so
	// RabbitMQ writes their x-death (not timed).
	t0 := time.Now()
	stopRejecting, err := rejectAll(conn, source)
	if err != nil {
		return res, err
	}
	if err := prefill(ctx, conn, "", source, false, o.n, o.size, suffix); err != nil {
		_ = stopRejecting()
		return res, fmt.Errorf("prefill: %w", err)
	}
	if err := waitReady(conn, queue, o.n, 5*time.Minute); err != nil {
		_ = stopRejecting()
		return res, err
	}
	if err := stopRejecting(); err != nil {
		return res, err
	}
	res.SeedSecs = time.Since(t0).Seconds()
	if err := admin.Checkpoint(ctx); err != nil {
		return res, err
	}

	// Ingest: dlq serve with its defaults drains the backlog.
	env := map[string]string{
		"DLQ_DATABASE_URL": dsn, "DLQ_AMQP_URL": o.amqpURL, "DLQ_EXCHANGE": exchange, "DLQ_QUEUES": queue,
		"DLQ_CONTROL_QUEUE": controlQueue, "DLQ_LOG_LEVEL": "warn", "DLQ_ADMIN_TOKEN": benchAdminToken,
		"DLQ_REPLAY_BATCH_SIZE": fmt.Sprint(o.batch), "DLQ_REPLAY_WINDOW": fmt.Sprint(o.window),
	}
	c0, start := o.cpu.take(), time.Now()
	procs, err := startInstances(bin, 1, env)
	if err != nil {
		return res, err
	}
	defer procs.stop()
	if err := waitStored(st, o.n, procs.exited, procs.why); err != nil {
		return res, err
	}
	res.IngestSecs = time.Since(start).Seconds()
	res.IngestMsgsSec = float64(o.n) / res.IngestSecs
	c1, dlq1 := o.cpu.take(), procs.cpu()
	rmq, pg := c1.since(c0)
	res.IngestCPU = [3]float64{dlq1 / res.IngestSecs * 100, rmq / res.IngestSecs * 100, pg / res.IngestSecs * 100}
	if err := procs.waitReady(0, time.Minute); err != nil {
		return res, err
	}

	if o.analyze {
		if err := st.Bench().Analyze(ctx, "dead_messages"); err != nil {
			return res, err
		}
		res.Analyzed = true
	}

	// Replay through the control queue, as `dlq replay` sends it.
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	client, err := control.Dial(cctx, o.amqpURL, controlQueue, benchAdminToken)
	cancel()
	if err != nil {
		return res, err
	}
	defer client.Close()
	cmd := control.Command{Command: control.CmdReplay, Confirm: true,
		Request: replay.Request{Filter: &store.Filter{SourceQueue: source}}}
	c2, dlq2, start := o.cpu.take(), procs.cpu(), time.Now()
	cctx, cancel = context.WithTimeout(ctx, time.Minute)
	ans, err := client.Call(cctx, cmd)
	cancel()
	if err != nil {
		return res, err
	}
	if !ans.OK {
		return res, fmt.Errorf("replay command refused: %+v", ans.Error)
	}
	var task replay.Task
	if err := json.Unmarshal(ans.Result, &task); err != nil || task.ID == 0 {
		return res, fmt.Errorf("replay command answered %s: no task (%v)", ans.Result, err)
	}
	// Completion is read from the task's row, as often as the seeded mode
	// reads it, so that polling costs dlq nothing.
	deadline := start.Add(10 * time.Minute)
	for {
		t, err := st.GetReplayTask(ctx, task.ID)
		if err != nil {
			return res, err
		}
		if store.TaskFinished(t.Status) {
			if t.Status != replay.StatusCompleted || t.Published != int64(o.n) {
				return res, fmt.Errorf("task %d ended %s with %d of %d published (%s)", t.ID, t.Status, t.Published, o.n, t.Error)
			}
			break
		}
		if time.Now().After(deadline) {
			return res, fmt.Errorf("task %d not finished after 10 minutes: %s, %d published", t.ID, t.Status, t.Published)
		}
		time.Sleep(5 * time.Millisecond)
	}
	res.Secs = time.Since(start).Seconds()
	res.MsgsSec = float64(o.n) / res.Secs
	c3, dlq3 := o.cpu.take(), procs.cpu()
	rmq, pg = c3.since(c2)
	res.CPUDlq, res.CPURabbit, res.CPUPg = (dlq3-dlq2)/res.Secs*100, rmq/res.Secs*100, pg/res.Secs*100

	// The control queue reports the same task as completed.
	cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	ans, err = client.Call(cctx, control.Command{Command: control.CmdReplayStatus, ID: task.ID})
	cancel()
	if err != nil {
		return res, err
	}
	if err := json.Unmarshal(ans.Result, &task); err != nil || !ans.OK || task.Status != replay.StatusCompleted {
		return res, fmt.Errorf("replay_status answered %s / %+v (%v)", ans.Result, ans.Error, err)
	}
	if err := procs.stop(); err != nil {
		return res, err
	}
	q, err := passive(conn, source)
	if err != nil {
		return res, err
	}
	if q.Messages != o.n {
		return res, fmt.Errorf("source queue %s holds %d messages after the replay, want %d", source, q.Messages, o.n)
	}
	return res, nil
}
