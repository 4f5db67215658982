//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/proctest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// targetQueue declares a quorum queue for replayed messages through the
// broker node url (so its leader is there), deleted when the test ends.
func (d *deployment) targetQueue(url string) string {
	d.t.Helper()
	name := fmt.Sprintf("tgt_%s_%d", d.runID, time.Now().UnixNano()%1e6)
	conn, err := amqp.Dial(url)
	require.NoError(d.t, err)
	defer conn.Close()
	ch, err := conn.Channel()
	require.NoError(d.t, err)
	_, err = ch.QueueDeclare(name, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
	require.NoError(d.t, err)
	d.t.Cleanup(func() {
		if conn, err := d.dial(30 * time.Second); err == nil {
			if ch, err := conn.Channel(); err == nil {
				_, _ = ch.QueueDelete(name, false, false, false)
			}
			_ = conn.Close()
		}
	})
	return name
}

// startReplay asks instance i's API to replay the pending messages of
// sourceQueue (every queue when "") to queue through the default exchange,
// at rate per second.
func (d *deployment) startReplay(i int, sourceQueue, queue string, rate int) replay.Task {
	d.t.Helper()
	filter := map[string]any{}
	if sourceQueue != "" {
		filter["source_queue"] = sourceQueue
	}
	var task replay.Task
	require.NoError(d.t, d.api(i, "POST", "/api/v1/replays", map[string]any{
		"filter": filter, "confirm": true, "rate_per_second": rate,
		"target": map[string]any{"exchange": "", "routing_key": queue},
	}, &task))
	d.t.Logf("replay task %d started on instance %d: %d messages at %d/s", task.ID, i, task.Requested, rate)
	return task
}

// task reads task id through any running instance.
func (d *deployment) task(id int64) (replay.Task, error) {
	var task replay.Task
	err := fmt.Errorf("no instance running")
	for i := range d.instances {
		if !d.running(i) {
			continue
		}
		if err = d.api(i, "GET", fmt.Sprintf("/api/v1/replays/%d", id), nil, &task); err == nil {
			return task, nil
		}
	}
	return task, err
}

// waitTask waits until task id has finished.
func (d *deployment) waitTask(id int64, timeout time.Duration) replay.Task {
	d.t.Helper()
	var task replay.Task
	eventually(d.t, timeout, func() (bool, string) {
		var err error
		task, err = d.task(id)
		return err == nil && store.TaskFinished(task.Status), fmt.Sprintf("task %d not finished: %+v, %v", id, task, err)
	})
	return task
}

// runner returns the running instance that runs task id now (the one
// whose metrics show the task's progress), or -1.
func (d *deployment) runner(id int64) (int, float64) {
	sample := fmt.Sprintf(`dlq_replay_task_messages{state="published",task="%d"}`, id)
	for i := range d.instances {
		if !d.running(i) {
			continue
		}
		if v, err := proctest.Metric(d.instances[i].addr, sample); err == nil {
			return i, v
		}
	}
	return -1, 0
}

// waitRunner waits until an instance other than those in not runs task id
// and has published at least some of it.
func (d *deployment) waitRunner(id int64, not map[int]bool, some float64, timeout time.Duration) int {
	d.t.Helper()
	r := -1
	eventually(d.t, timeout, func() (bool, string) {
		var published float64
		r, published = d.runner(id)
		task, _ := d.task(id)
		return r >= 0 && !not[r] && published >= some,
			fmt.Sprintf("task %d: runner %d (published %.0f there), wanted one not in %v with %.0f published; task %+v", id, r, published, not, some, task)
	})
	return r
}

// arrivals reads every message in queue through the broker node url and
// counts how many arrived per x-dlq-id.
func arrivals(url, queue string) (map[int64]int, error) {
	conn, err := amqp.Dial(url)
	if err != nil {
		return nil, err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("inspect %s: %w", queue, err)
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		return nil, err
	}
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	if err != nil {
		return nil, err
	}
	per := map[int64]int{}
	timeout := time.After(5 * time.Minute)
	for n := 0; n < q.Messages; n++ {
		select {
		case m, ok := <-ds:
			if !ok {
				return nil, fmt.Errorf("consumer of %s closed after %d of %d", queue, n, q.Messages)
			}
			id, ok := m.Headers[broker.HeaderID].(int64)
			if !ok {
				return nil, fmt.Errorf("a message in %s without %s: %v", queue, broker.HeaderID, m.Headers)
			}
			per[id]++
		case <-timeout:
			return nil, fmt.Errorf("read %d of %d messages of %s in 5 minutes", n, q.Messages, queue)
		}
	}
	return per, nil
}

// replayTally compares the rows with what reached the target queue.
type replayTally struct {
	Requested, Arrived int
	// Replayed rows (status replayed), Unknown ones (pending, "outcome
	// unknown"), and rows still Replaying.
	Replayed, Unknown, Replaying int
	// ReplayedNotArrived: marked replayed, but not in the target queue
	// (a replay recorded without its confirm). Twice: arrived more than
	// once. TwiceUnexplained: arrived more often than the task's unknown
	// outcomes of it allow (one copy, plus one per publish whose confirm
	// never came). ArrivedUnmarked: arrived, but neither replayed nor
	// unknown.
	ReplayedNotArrived, Twice, TwiceUnexplained, ArrivedUnmarked int
	// InDoubt: messages with an unknown outcome the task recorded (sent
	// again with on_unknown retry).
	InDoubt int
}

func (r replayTally) String() string {
	return fmt.Sprintf("requested=%d arrived=%d replayed=%d unknown=%d replaying=%d replayed_not_arrived=%d twice=%d twice_unexplained=%d arrived_unmarked=%d in_doubt=%d",
		r.Requested, r.Arrived, r.Replayed, r.Unknown, r.Replaying, r.ReplayedNotArrived, r.Twice, r.TwiceUnexplained, r.ArrivedUnmarked, r.InDoubt)
}

// replayCheck reads the replayed rows and the task's items back and
// counts them against the target queue's messages.
func (d *deployment) replayCheck(task replay.Task, per map[int64]int) replayTally {
	d.t.Helper()
	r := replayTally{Requested: int(task.Requested)}
	status := map[int64]string{}
	unknowns := map[int64]int{}
	d.query(func(ctx context.Context) error {
		clear(status)
		clear(unknowns)
		rows, err := d.db.Query(ctx, `
SELECT id, CASE WHEN status = 'pending' AND last_replay_error LIKE 'outcome unknown%' THEN 'unknown' ELSE status END
FROM dead_messages WHERE status <> 'pending' OR last_replay_error IS NOT NULL`)
		if err != nil {
			return err
		}
		for rows.Next() {
			var id int64
			var s string
			if err := rows.Scan(&id, &s); err != nil {
				rows.Close()
				return err
			}
			status[id] = s
		}
		rows.Close()
		if err := rows.Err(); err != nil {
			return err
		}
		rows, err = d.db.Query(ctx, `SELECT message_id, unknown_count FROM replay_task_items WHERE task_id = $1 AND unknown_count > 0`, task.ID)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var id int64
			var n int
			if err := rows.Scan(&id, &n); err != nil {
				return err
			}
			unknowns[id] = n
		}
		return rows.Err()
	})
	r.InDoubt = len(unknowns)
	// Why the rows not replayed are not, for the log.
	d.query(func(ctx context.Context) error {
		rows, err := d.db.Query(ctx, `
SELECT status, left(coalesce(last_replay_error, ''), 160), count(*) FROM dead_messages
WHERE status <> 'replayed' GROUP BY 1, 2 ORDER BY 3 DESC LIMIT 10`)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var status, why string
			var n int
			if err := rows.Scan(&status, &why, &n); err != nil {
				return err
			}
			d.t.Logf("not replayed: %d rows %s: %q", n, status, why)
		}
		return rows.Err()
	})
	for id, s := range status {
		switch s {
		case store.StatusReplayed:
			r.Replayed++
			if per[id] == 0 {
				r.ReplayedNotArrived++
			}
		case "unknown":
			r.Unknown++
		case store.StatusReplaying:
			r.Replaying++
		}
	}
	for id, n := range per {
		r.Arrived++
		if n > 1 {
			r.Twice++
		}
		if n > 1+unknowns[id] {
			r.TwiceUnexplained++
		}
		if s := status[id]; s != store.StatusReplayed && s != "unknown" {
			r.ArrivedUnmarked++
		}
	}
	return r
}

// The replay settings of the deployments: dlq's defaults.
const (
	replayWindow = 1000 // replay.window
	replayBatch  = 500  // replay.batch_size
)

// inDoubtBound is docs/REPLAY.md's bound ("Duplicates and unknown
// outcomes") on the messages one fault that stops a replaying process from
// recording outcomes (kill -9, a lost database) can make arrive twice: the
// publishes awaiting their confirms, and the confirmed ones whose outcome
// waited to be recorded (queued, and in the three settlements under way).
func inDoubtBound(window, batch int) int {
	return window + 4*(max(window, batch)+window)
}

// requireReplayExact asserts what dlq promises of a replay through any
// fault: nothing marked replayed that did not arrive, nothing arrived more
// often than once plus once per publish of it whose outcome was unknown
// (and at most maxTwice messages more than once), nothing arrived that is
// not accounted for, nothing left replaying, and the task's counters
// agreeing with the rows.
func requireReplayExact(d *deployment, task replay.Task, r replayTally, maxTwice int) {
	d.t.Helper()
	d.t.Logf("replay checker: %s; task %d %s: published %d, unknown %d, failed %d, skipped %d, republished %d",
		r, task.ID, task.Status, task.Published, task.Unknown, task.Failed, task.Skipped, task.Republished)
	require.Equal(d.t, replay.StatusCompleted, task.Status, "task %+v", task)
	require.Zero(d.t, r.ReplayedNotArrived, "marked replayed without arriving: %s", r)
	require.Zero(d.t, r.TwiceUnexplained, "arrived more often than its unknown outcomes allow: %s", r)
	require.LessOrEqual(d.t, r.Twice, maxTwice, "arrived twice: %s", r)
	require.Zero(d.t, r.ArrivedUnmarked, "arrived without being marked replayed or unknown: %s", r)
	require.Zero(d.t, r.Replaying, "left replaying: %s", r)
	require.Equal(d.t, int64(r.Replayed), task.Published, "the task's published counter and the replayed rows")
	require.Equal(d.t, int64(r.Unknown), task.Unknown, "the task's unknown counter and the rows back pending as unknown")
	require.Equal(d.t, task.Requested, task.Published+task.Unknown+task.Failed+task.Skipped, "every item settled")
}
