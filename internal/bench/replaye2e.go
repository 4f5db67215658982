package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

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

// replayE2E measures one end-to-end run: dead letters RabbitMQ has just
// made, ingested by a dlq serve process (timed too), then replayed to
// their source through the control queue.
func replayE2E(o replayOptions, bin string, run int) (replayResult, error) {
	ctx := context.Background()
	res := replayResult{Bench: "replay", Mode: modeE2E, N: o.n, Size: o.size, Run: run, Batch: o.batch, Window: o.window, QueueType: o.queueType}
	e := &e2eRun{o: o, suffix: randomHex(4)}
	defer e.undo.run()
	if err := e.setUp(ctx); err != nil {
		return res, err
	}
	var err error
	if res.SeedSecs, err = e.seed(ctx); err != nil {
		return res, err
	}
	procs, err := e.ingest(bin, &res)
	if err != nil {
		return res, err
	}
	if o.analyze {
		if err := e.st.Bench().Analyze(ctx, "dead_messages"); err != nil {
			return res, err
		}
		res.Analyzed = true
	}
	if err := e.replayThroughControl(ctx, procs, &res); err != nil {
		return res, err
	}
	if err := procs.stop(); err != nil {
		return res, err
	}
	q, err := passive(e.conn, e.source)
	if err != nil {
		return res, err
	}
	if q.Messages != o.n {
		return res, fmt.Errorf("source queue %s holds %d messages after the replay, want %d", e.source, q.Messages, o.n)
	}
	return res, nil
}

// e2eRun is one end-to-end run's names, schema, store and broker
// connection, and what undoes them.
type e2eRun struct {
	o                                     replayOptions
	suffix, exchange, queue, source, ctlQ string
	dsn                                   string
	admin                                 *store.BenchAdmin
	st                                    *store.Store
	conn                                  *amqp.Connection
	undo                                  undoStack
}

// setUp makes the schema (migrated), dlq's exchange and queue as dlq
// declares them, and a source queue of the measured type that
// dead-letters to the exchange.
func (e *e2eRun) setUp(ctx context.Context) error {
	e.exchange, e.queue = "bench.e2e.dlx."+e.suffix, "bench.e2e.dlq."+e.suffix
	e.source, e.ctlQ = "bench.e2e.src."+e.suffix, "bench.e2e.control."+e.suffix
	admin, dsn, dropSchema, err := runSchema(ctx, e.o.pgURL, "dlqbench_e2e_"+e.suffix, e.o.keep)
	if err != nil {
		return err
	}
	e.admin, e.dsn = admin, dsn
	e.undo.push(dropSchema)
	if e.st, err = store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2}); err != nil {
		return err
	}
	e.undo.push(e.st.Close)
	if _, err := e.st.Migrate(ctx, nil); err != nil {
		return err
	}

	var ch *amqp.Channel
	if e.conn, ch, err = dialDLQ(e.o.amqpURL, e.exchange, e.queue, ""); err != nil {
		return err
	}
	e.undo.push(func() { _ = e.conn.Close() })
	srcArgs := amqp.Table{"x-queue-type": e.o.queueType, "x-dead-letter-exchange": e.exchange}
	if _, err := ch.QueueDeclare(e.source, true, false, false, false, srcArgs); err != nil {
		return fmt.Errorf("declare source queue %s: %w", e.source, err)
	}
	if !e.o.keep {
		e.undo.push(func() {
			if c, err := e.conn.Channel(); err == nil {
				for _, q := range []string{e.source, e.queue, e.ctlQ} {
					_, _ = c.QueueDelete(q, false, false, false)
				}
				_ = c.ExchangeDelete(e.exchange, false, false)
				_ = c.Close()
			}
		})
	}
	return nil
}

// seed makes the dead letters, fresh: published to the source and
// rejected there, so RabbitMQ writes their x-death (not timed). It returns
// how long that took.
func (e *e2eRun) seed(ctx context.Context) (float64, error) {
	t0 := time.Now()
	stopRejecting, err := rejectAll(e.conn, e.source)
	if err != nil {
		return 0, err
	}
	if err := prefill(ctx, e.conn, "", e.source, false, e.o.n, e.o.size, e.suffix); err != nil {
		_ = stopRejecting()
		return 0, fmt.Errorf("prefill: %w", err)
	}
	if err := waitReady(e.conn, e.queue, e.o.n, 5*time.Minute); err != nil {
		_ = stopRejecting()
		return 0, err
	}
	if err := stopRejecting(); err != nil {
		return 0, err
	}
	secs := time.Since(t0).Seconds()
	return secs, e.admin.Checkpoint(ctx)
}

// ingest starts dlq serve with its defaults, times its drain of the
// backlog into res, and returns it running and ready.
func (e *e2eRun) ingest(bin string, res *replayResult) (*instances, error) {
	env := map[string]string{
		"DLQ_DATABASE_URL": e.dsn, "DLQ_AMQP_URL": e.o.amqpURL, "DLQ_EXCHANGE": e.exchange, "DLQ_QUEUES": e.queue,
		"DLQ_CONTROL_QUEUE": e.ctlQ, "DLQ_LOG_LEVEL": "warn", "DLQ_ADMIN_TOKEN": benchAdminToken,
		"DLQ_REPLAY_BATCH_SIZE": fmt.Sprint(e.o.batch), "DLQ_REPLAY_WINDOW": fmt.Sprint(e.o.window),
	}
	c0, start := e.o.cpu.take(), time.Now()
	procs, err := startInstances(bin, 1, env)
	if err != nil {
		return nil, err
	}
	e.undo.push(func() { _ = procs.stop() })
	if err := waitStored(e.st, e.o.n, procs.exited, procs.why); err != nil {
		return nil, err
	}
	res.IngestSecs = time.Since(start).Seconds()
	res.IngestMsgsSec = float64(e.o.n) / res.IngestSecs
	c1, dlq1 := e.o.cpu.take(), procs.cpu()
	rmq, pg := c1.since(c0)
	res.IngestCPU = [3]float64{dlq1 / res.IngestSecs * 100, rmq / res.IngestSecs * 100, pg / res.IngestSecs * 100}
	return procs, procs.waitReady(0, time.Minute)
}

// replayThroughControl asks for the replay of every message as `dlq
// replay` does, on the control queue, times it until the task is
// completed, with the CPU of each program, and checks that the control
// queue reports it completed too.
func (e *e2eRun) replayThroughControl(ctx context.Context, procs *instances, res *replayResult) error {
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	client, err := control.Dial(cctx, e.o.amqpURL, e.ctlQ, benchAdminToken)
	cancel()
	if err != nil {
		return err
	}
	defer client.Close()
	cmd := control.Command{Command: control.CmdReplay, Confirm: true,
		Request: replay.Request{Filter: &store.Filter{SourceQueue: e.source}}}
	c2, dlq2, start := e.o.cpu.take(), procs.cpu(), time.Now()
	cctx, cancel = context.WithTimeout(ctx, time.Minute)
	ans, err := client.Call(cctx, cmd)
	cancel()
	if err != nil {
		return err
	}
	if !ans.OK {
		return fmt.Errorf("replay command refused: %+v", ans.Error)
	}
	var task replay.Task
	if err := json.Unmarshal(ans.Result, &task); err != nil || task.ID == 0 {
		return fmt.Errorf("replay command answered %s: no task (%v)", ans.Result, err)
	}
	if err := e.waitCompleted(ctx, task.ID, start.Add(10*time.Minute)); err != nil {
		return err
	}
	res.Secs = time.Since(start).Seconds()
	res.MsgsSec = float64(e.o.n) / res.Secs
	c3, dlq3 := e.o.cpu.take(), procs.cpu()
	rmq, pg := c3.since(c2)
	res.CPUDlq, res.CPURabbit, res.CPUPg = (dlq3-dlq2)/res.Secs*100, rmq/res.Secs*100, pg/res.Secs*100

	cctx, cancel = context.WithTimeout(ctx, 30*time.Second)
	ans, err = client.Call(cctx, control.Command{Command: control.CmdReplayStatus, ID: task.ID})
	cancel()
	if err != nil {
		return err
	}
	if err := json.Unmarshal(ans.Result, &task); err != nil || !ans.OK || task.Status != replay.StatusCompleted {
		return fmt.Errorf("replay_status answered %s / %+v (%v)", ans.Result, ans.Error, err)
	}
	return nil
}

// waitCompleted reads the task's row until it has finished, as often as
// the seeded mode reads it, so that polling costs dlq nothing; anything
// but completed with every message published is an error.
func (e *e2eRun) waitCompleted(ctx context.Context, id int64, deadline time.Time) error {
	for {
		t, err := e.st.GetReplayTask(ctx, id)
		if err != nil {
			return err
		}
		if store.TaskFinished(t.Status) {
			if t.Status != replay.StatusCompleted || t.Published != int64(e.o.n) {
				return fmt.Errorf("task %d ended %s with %d of %d published (%s)", t.ID, t.Status, t.Published, e.o.n, t.Error)
			}
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("task %d not finished after 10 minutes: %s, %d published", t.ID, t.Status, t.Published)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
