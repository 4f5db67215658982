//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/internal/proctest"
)

// TestInstancesKill9 runs three `dlq serve` processes on one database and
// one dead-letter queue (the shared servers). 50,000 distinct dead letters
// arrive by three routes while one instance, then another, is killed with
// -9 and restarted: every one is stored exactly once. Then one replay of
// all of them, started on one instance, is worked by all three in turn
// (each hands it over by stopping), and each row reaches the target once.
//
// The tests of this package run one at a time: each loads the machine's
// two cores on its own.
func TestInstancesKill9(t *testing.T) {
	const (
		n     = 50_000
		rate  = 2500 // dead letters per second: arrivals last 20 s
		kills = 2
	)
	d := newDeployment(t, deployOpts{instances: 3})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.rejecter(ctx)
	d.startAll()
	pub := d.publish(ctx, n, rate, nil, proctest.ViaTTL, proctest.ViaReject, proctest.ViaDirect, proctest.ViaDirect)

	first := rand.IntN(len(d.instances))
	for k := range kills {
		// Spread over the burst: past a third of it, then past two thirds,
		// at a random point after that.
		at := (k + 1) * n / (kills + 1)
		eventually(t, 2*time.Minute, func() (bool, string) {
			rows := d.rowCount()
			return rows > at, fmt.Sprintf("%d rows, waiting for %d", rows, at)
		})
		time.Sleep(rand.N(2 * time.Second))
		victim := (first + k) % len(d.instances)
		d.kill9(victim)
		t.Logf("kill %d: instance %d at %d rows", k+1, victim, d.rowCount())
		d.start(victim)
	}
	pub.Wait(t, 3*time.Minute)
	d.waitReadyz(200, 3*time.Minute) // a restarted instance migrates first (startAll)
	d.waitDrained(3 * time.Minute)
	d.stopAll()
	d.requireQueuesEmpty()
	c := d.check()
	d.requireExact(c)
	require.Greater(t, c.Confirmed, n*9/10, "the test did not exercise what it claims: %s", c)

	// One replay of every stored row, started on instance 0.
	d.startAll()
	target := d.targetQueue(d.urls[0])
	task := d.startReplay(0, "", target, 2000)
	require.EqualValues(t, c.Rows, task.Requested)
	// Hand it from instance to instance: stop its runner, wait for
	// another to take it, stop that one too, so the third must finish it.
	seen := map[int]bool{}
	for len(seen) < 2 {
		r := d.waitRunner(task.ID, seen, float64(len(seen)+1)*2000, 2*time.Minute)
		seen[r] = true
		t.Logf("task %d runs on instance %d; stopping it", task.ID, r)
		d.stop(r)
	}
	last := d.waitRunner(task.ID, seen, 0, 2*time.Minute)
	seen[last] = true
	t.Logf("task %d runs on instance %d, the last one", task.ID, last)
	final := d.waitTask(task.ID, 3*time.Minute)
	require.Len(t, seen, 3, "every instance ran the task")
	per, err := arrivals(d.urls[0], target)
	require.NoError(t, err)
	r := d.replayCheck(final, per)
	requireReplayExact(d, final, r, 0) // handed over cleanly: nothing in doubt
	require.EqualValues(t, c.Rows, final.Published, "handed over cleanly, every row is published: %+v", final)
	require.Equal(t, c.Rows, r.Arrived)
	d.stopAll()
	require.Zero(t, dlqtest.QueueDepth(t, dlqtest.Dial(t), d.queue), "nothing came back to dlq's queue")
}
