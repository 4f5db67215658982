//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/proctest"
)

// TestRabbitMQNodeLoss runs two dlq instances against a three-node
// RabbitMQ cluster (DLQ_AMQP_URL naming the three), dlq's queue a quorum
// queue over them. During a burst of dead letters the node holding the
// queue's leader is killed: dlq fails over to the next node and ingest
// resumes by itself, with nothing lost or stored twice. Then a replay runs
// into a quorum queue whose leader is on the node dlq is connected to, and
// that node is killed mid-replay: nothing is marked replayed that the
// broker did not confirm (every replayed row is in the target queue), the
// publishes the loss left unconfirmed are sent again, every message
// arrives, at most the in-flight window of them twice, and the task
// completes with nothing unknown.
func TestRabbitMQNodeLoss(t *testing.T) {
	const (
		n    = 30_000
		rate = 2000
	)
	rc := rabbitNodes(t)
	for i := range rc.nodes {
		t.Cleanup(func() {
			if err := rc.ensureUp(i); err != nil {
				t.Errorf("bring RabbitMQ node %d back: %v", i, err)
			}
		})
	}
	// dlq's queue is declared through node 0, so its leader is there, and
	// dlq's instances dial node 0 first.
	d := newDeployment(t, deployOpts{urls: rc.urls(0), instances: 2, env: map[string]string{"DLQ_REPLAY_LEASE": "10s"}})
	c := nodeLossDuringIngest(t, rc, d, n, rate)
	nodeLossDuringReplay(t, rc, d, c.Rows)
}

// nodeLossDuringIngest kills the node of dlq's queue leader during a
// burst of n dead letters at rate, and checks the outcome exact.
func nodeLossDuringIngest(t *testing.T, rc *rabbitCluster, d *deployment, n, rate int) proctest.Tally {
	t.Helper()
	leader, err := rc.leader(0, d.queue)
	require.NoError(t, err)
	require.Equal(t, 0, leader, "the queue's leader is on the node that declared it")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.startAll()
	// The publisher goes through the two other nodes, so that the broker
	// confirms (and the ledger knows) every dead letter though node 0 dies.
	pub := d.publish(ctx, n, rate, rc.urls(1)[:2], proctest.ViaDirect)
	eventually(t, 60*time.Second, func() (bool, string) {
		rows := d.rowCount()
		return rows > 5000, fmt.Sprintf("ingest not under way: %d rows", rows)
	})
	rc.kill(leader)
	killedAt, killed := d.rowCount(), time.Now()
	t.Logf("killed node %d (the leader of %s) at %d rows", leader, d.queue, killedAt)
	// Nobody restarts anything: ingest resumes by itself.
	eventually(t, 2*time.Minute, func() (bool, string) {
		rows := d.rowCount()
		return rows > killedAt+5000, fmt.Sprintf("ingest did not resume: %d rows, %d at the kill", rows, killedAt)
	})
	t.Logf("ingest resumed: %d rows %s after the kill", d.rowCount(), time.Since(killed).Round(time.Second))
	d.waitReadyz(200, 60*time.Second)
	newLeader, err := rc.leader(1, d.queue)
	require.NoError(t, err)
	require.NotEqual(t, leader, newLeader)
	for i := range d.instances {
		require.NotEmpty(t, d.logLines(i, "connected to RabbitMQ", fmt.Sprintf("127.0.0.1:%d", rc.nodes[1].port)),
			"instance %d did not fail over to node 1", i)
	}
	pub.Wait(t, 3*time.Minute)
	require.NoError(t, rc.restartNode(leader))
	d.waitDrained(3 * time.Minute)
	d.stopAll()
	d.requireQueuesEmpty()
	c := d.check()
	d.requireExact(c)
	require.Greater(t, c.Confirmed, n*9/10, "the test did not exercise what it claims: %s", c)
	return c
}

// nodeLossDuringReplay replays the rows stored into a quorum queue whose
// leader is on the node dlq's instances are connected to, kills that
// node mid-replay, and checks the replay exact: with nobody doing anything
// more, every stored message arrives and is marked replayed, the task
// completes with nothing unknown, and what arrived twice is what the task
// sent again after the publishes the loss left unconfirmed: at most the
// in-flight window.
func nodeLossDuringReplay(t *testing.T, rc *rabbitCluster, d *deployment, rows int) {
	t.Helper()
	// dlq's instances now dial node 1 first, and the target queue's
	// leader is on node 1 too.
	d.urls = rc.urls(1)
	d.startAll()
	target := d.targetQueue(rc.url(1))
	tl, err := rc.leader(1, target)
	require.NoError(t, err)
	require.Equal(t, 1, tl)
	task := d.startReplay(0, "orders.work", target, 3000)
	require.EqualValues(t, rows, task.Requested)
	eventually(t, 2*time.Minute, func() (bool, string) {
		cur, err := d.task(task.ID)
		return err == nil && cur.Published >= task.Requested/4, fmt.Sprintf("replay not under way: %+v %v", cur, err)
	})
	rc.kill(1)
	killed := time.Now()
	mid, _ := d.task(task.ID)
	t.Logf("killed node 1 (the target's leader, dlq's connections) at %d published", mid.Published)
	final := d.waitTask(task.ID, 5*time.Minute)
	t.Logf("task %d completed %s after the kill", task.ID, final.FinishedAt.Sub(killed).Round(time.Second))
	require.NoError(t, rc.ensureUp(1))
	per, err := arrivals(rc.url(0), target)
	require.NoError(t, err)
	r := d.replayCheck(final, per)
	nacked := 0
	for i := range d.instances {
		nacked += len(d.logLines(i, "publishing on a new channel"))
	}
	t.Logf("MEASURED node lost mid-replay: %d of %d messages arrived twice (window %d); %d sent again (republished), %d publishes in doubt; %d channels left after a nack",
		r.Twice, rows, replayWindow, final.Republished, r.InDoubt, nacked)
	requireReplayExact(d, final, r, replayWindow)
	require.Zero(t, final.Unknown, "every unknown outcome was sent again: %+v", final)
	require.EqualValues(t, rows, final.Published, "every message replayed: %+v", final)
	require.Equal(t, rows, r.Arrived, "every stored message arrived: %s", r)
	d.stopAll()
}

// logLines returns the lines of instance i's output that contain every
// one of parts.
func (d *deployment) logLines(i int, parts ...string) []string {
	b, err := os.ReadFile(d.instances[i].log)
	if err != nil {
		return nil
	}
	var out []string
lines:
	for _, line := range strings.Split(string(b), "\n") {
		for _, p := range parts {
			if !strings.Contains(line, p) {
				continue lines
			}
		}
		out = append(out, line)
	}
	return out
}
