//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestRabbitMQRollingRestartReplay replays stored messages while every
// node of the three-node RabbitMQ cluster is restarted in turn, as a
// rolling broker upgrade does: each node stopped (rabbitmqctl stop) and
// started again, and back before the next goes. dlq's two instances dial
// the node restarted first, and the target quorum queue's leader is
// there. With nobody doing anything, the replay finishes with every
// message delivered and marked replayed and nothing unknown; the number
// that arrived twice is printed, and is at most the in-flight window per
// restart. DLQ_TEST_ROLLING_ROWS and DLQ_TEST_ROLLING_RATE set how many
// messages, and how fast (0: as fast as confirms allow); docs/REPLAY.md
// has the figures of a run with 1,000,000 (with TEST_DATABASE_URL naming
// the bench database).
func TestRabbitMQRollingRestartReplay(t *testing.T) {
	// At 200/s the replay of 20,000 lasts 100 s: the three restarts, 14 to
	// 20 s each on a loaded machine, begin at a fifth, two fifths and three
	// fifths of it, so the last is over well before the replay ends (at
	// 500/s and quarters, two slow restarts let it end before the third).
	rows, rate := envInt(t, "DLQ_TEST_ROLLING_ROWS", 20_000), envInt(t, "DLQ_TEST_ROLLING_RATE", 200)
	rc := rabbitNodes(t)
	for i := range rc.nodes {
		require.NoError(t, rc.ensureUp(i))
		t.Cleanup(func() {
			if err := rc.ensureUp(i); err != nil {
				t.Errorf("bring RabbitMQ node %d back: %v", i, err)
			}
		})
	}
	st, dsn := dlqtest.Store(t)
	d := newDeployment(t, deployOpts{dsn: dsn, urls: rc.urls(0), instances: 2, env: map[string]string{"DLQ_REPLAY_LEASE": "10s"}})
	target := d.targetQueue(rc.url(0))
	src := "rolling_" + d.runID
	seeded := time.Now()
	seedRows(t, st, src, target, rows)
	t.Logf("%d messages stored in %s", rows, time.Since(seeded).Round(time.Second))

	d.startAll()
	start := time.Now()
	task := d.startReplay(0, src, target, rate)
	require.EqualValues(t, rows, task.Requested)
	for i := range rc.nodes {
		at := int64(i+1) * task.Requested / int64(len(rc.nodes)+2)
		eventually(t, 30*time.Minute, func() (bool, string) {
			cur, err := d.task(task.ID)
			return err == nil && (cur.Published >= at || store.TaskFinished(cur.Status)), fmt.Sprintf("replay at %+v %v, waiting for %d published", cur, err, at)
		})
		cur, _ := d.task(task.ID)
		require.False(t, store.TaskFinished(cur.Status), "the replay ended before node %d's restart: slow it down (DLQ_TEST_ROLLING_RATE)", i)
		down := time.Now()
		require.NoError(t, rc.stopNode(i))
		require.NoError(t, rc.restartNode(i))
		t.Logf("node %d restarted at %d published: down %s", i, cur.Published, time.Since(down).Round(time.Second))
	}
	final := d.waitTask(task.ID, 30*time.Minute)
	took := final.FinishedAt.Sub(start)
	per, err := arrivals(rc.url(0), target)
	require.NoError(t, err)
	r := d.replayCheck(final, per)
	nacked := 0
	for i := range d.instances {
		nacked += len(d.logLines(i, "publishing on a new channel"))
	}
	t.Logf("MEASURED rolling restart of 3 nodes during a replay of %d messages (rate %d/s, 0: unthrottled): took %s; %d arrived twice (window %d); %d sent again (republished), %d publishes in doubt; %d channels left after a nack",
		rows, rate, took.Round(time.Second), r.Twice, replayWindow, final.Republished, r.InDoubt, nacked)
	requireReplayExact(d, final, r, len(rc.nodes)*replayWindow)
	require.Zero(t, final.Unknown, "every unknown outcome was sent again: %+v", final)
	require.EqualValues(t, rows, final.Published, "every message replayed: %+v", final)
	require.Equal(t, rows, r.Arrived, "every stored message arrived: %s", r)
	d.stopAll()
}

// envInt reads a test setting from the environment.
func envInt(t *testing.T, name string, def int) int {
	t.Helper()
	v := os.Getenv(name)
	if v == "" {
		return def
	}
	n, err := strconv.Atoi(v)
	require.NoError(t, err, "%s=%q", name, v)
	return n
}

// seedRows stores n pending dead messages of queue src, which died in
// queue target (published to it through the default exchange), as dlq
// stores them, without going through RabbitMQ.
func seedRows(t *testing.T, st *store.Store, src, target string, n int) {
	t.Helper()
	now := time.Now().UTC()
	for done := 0; done < n; {
		b := store.IngestBatch{ID: store.NewBatchID(), Consumer: "seed"}
		for i := done; i < min(n, done+1000); i++ {
			b.Messages = append(b.Messages, store.NewMessage{
				SourceQueue: src, SourceRoutingKey: target, DeadLetterQueue: src, Reason: "rejected", DeathCount: 1,
				Properties: []byte(`{"delivery_mode":2}`), Headers: []byte(`{}`),
				Body: []byte(fmt.Sprintf(`{"n":%d}`, i)), FirstFailedAt: now, FailedAt: now, Fingerprint: int64(i + 1),
			})
		}
		done += len(b.Messages)
		_, err := st.IngestBatch(context.Background(), b)
		require.NoError(t, err)
	}
}

// stopNode stops node i's server the way an upgrade does (rabbitmqctl
// stop: its connections closed, its queue replicas stopped) and waits for
// its process to exit.
func (c *rabbitCluster) stopNode(i int) error {
	n := c.nodes[i]
	n.mu.Lock()
	exited := n.exited
	n.mu.Unlock()
	if _, err := c.ctl(i, 2*time.Minute, "stop"); err != nil {
		return err
	}
	select {
	case <-exited:
		return nil
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("RabbitMQ node %s did not exit after rabbitmqctl stop", n.name)
	}
}
