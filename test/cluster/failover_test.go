//go:build cluster

package cluster

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/proctest"
)

// TestPostgresFailover runs two dlq instances on a PostgreSQL primary
// with a streaming standby, through a multi-host URL with
// target_session_attrs=read-write. While dead letters arrive and a replay
// runs, the primary crashes (immediate shutdown: what it had not sent is
// gone), stays down a few seconds, and the standby is promoted: /readyz
// goes unready and comes back by itself, and no row is left replaying
// after the lease.
//
// With synchronous replication nothing is lost or duplicated, in ingest
// or in the replay, even with the standby cut off for a second before the
// crash (its WAL receiver stopped, as a network partition would: the
// primary's commits wait for it meanwhile). With
// asynchronous replication, the commits the standby had not received are
// gone after RabbitMQ forgot the dead letters they held: the test
// measures and reports that loss, with the standby in step and with it a
// second behind, and asserts nothing about it (docs/OPERATIONS.md,
// "PostgreSQL failover").
func TestPostgresFailover(t *testing.T) {
	t.Run("synchronous/standby_cut_off_1s", func(t *testing.T) { failover(t, true, time.Second) })
	t.Run("asynchronous/standby_in_step", func(t *testing.T) { failover(t, false, 0) })
	t.Run("asynchronous/standby_cut_off_1s", func(t *testing.T) { failover(t, false, time.Second) })
}

// failover runs one failover; cutOff is how long the standby receives
// nothing before the primary crashes.
func failover(t *testing.T, synchronous bool, cutOff time.Duration) {
	const (
		backlog    = 10_000 // stored first, then replayed during the failover
		burst      = 20_000 // arriving during the failover
		burstRate  = 2000
		replayRate = 1000
		lease      = 5 * time.Second
		// outage is how long the primary is down before the promotion:
		// the fault's length, long enough for dlq's writes to fail and
		// be retried.
		outage = 3 * time.Second
	)
	pg := newPGPair(t, synchronous)
	d := newDeployment(t, deployOpts{dsn: pg.migrated(), instances: 2, env: map[string]string{"DLQ_REPLAY_LEASE": lease.String()}})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	d.startAll()
	want := map[bool]string{true: "replication: synchronous to " + standbyName, false: "replication: asynchronous to " + standbyName}[synchronous]
	_, body := d.readyz(0)
	require.Contains(t, body, want, "/readyz names the replication")

	// The backlog arrives through a source queue of its own, so the replay
	// selects exactly it.
	d.publish(ctx, backlog, 0, nil, proctest.ViaTTL).Wait(t, 2*time.Minute)
	d.waitDrained(2 * time.Minute)
	target := d.targetQueue(d.urls[0])
	task := d.startReplay(0, d.ttlQueue, target, replayRate)
	pub := d.publish(ctx, burst, burstRate, nil, proctest.ViaDirect)
	eventually(t, time.Minute, func() (bool, string) {
		cur, err := d.task(task.ID)
		rows := d.rowCount()
		return err == nil && cur.Published >= 2000 && rows >= backlog+3000,
			fmt.Sprintf("replay and ingest not under way: %d rows, task %+v %v", rows, cur, err)
	})

	promoted := crashAndPromote(t, pg, d, cutOff, outage)
	_, body = d.readyz(0)
	require.Contains(t, body, "replication: no standby streaming", "/readyz: the promoted standby streams to none")

	// No row stays replaying once the lease has passed: claims of the
	// dead connections are taken back (every lease/2), or settled.
	eventually(t, 3*lease+30*time.Second, func() (bool, string) {
		n := d.count("status = 'replaying'")
		return n == 0, fmt.Sprintf("%d rows replaying %s after the promotion", n, time.Since(promoted).Round(time.Second))
	})
	t.Logf("no row replaying %s after the promotion (lease %s)", time.Since(promoted).Round(time.Second), lease)
	pub.Wait(t, 3*time.Minute)
	final := d.waitTask(task.ID, 3*time.Minute)
	if synchronous {
		d.waitDrained(3 * time.Minute)
	} else {
		d.waitDelivered(3 * time.Minute)
	}
	d.stopAll()
	d.requireQueuesEmpty()
	c := d.check()
	per, err := arrivals(d.urls[0], target)
	require.NoError(t, err)
	r := d.replayCheck(final, per)
	if synchronous {
		d.requireExact(c)
		// The runner cannot record outcomes while the primary is down: its
		// claims are taken back, and what it may have published is sent
		// again (on_unknown retry), one fault's worth at most.
		requireReplayExact(d, final, r, inDoubtBound(replayWindow, replayBatch))
		require.Zero(t, final.Unknown, "every unknown outcome was sent again: %+v", final)
		return
	}
	// Measured, not asserted: what asynchronous replication lost.
	t.Logf("MEASURED asynchronous replication, standby cut off %s before the crash: ingest lost %d of %d confirmed dead letters, duplicated %d (%s)",
		cutOff, c.Lost, c.Confirmed, c.Duplicated, c)
	t.Logf("MEASURED asynchronous replication, standby cut off %s before the crash: replay %s; task %d %s: published %d, unknown %d",
		cutOff, r, final.ID, final.Status, final.Published, final.Unknown)
	require.Zero(t, c.Unexpected, "rows of dead letters never published: %s", c)
}

// crashAndPromote cuts the standby off for cutOff (when not 0), crashes
// the primary, promotes the standby outage after the crash, and returns
// when, once every instance was unready and is ready again.
func crashAndPromote(t *testing.T, pg *pgPair, d *deployment, cutOff, outage time.Duration) time.Time {
	t.Helper()
	if cutOff > 0 {
		pg.cutOff()
		time.Sleep(cutOff) // the fault's length, not a wait for an effect
	}
	pg.crash(pg.primary)
	crashed := time.Now()
	if cutOff > 0 {
		pg.reconnect()
	}
	d.waitReadyz(http.StatusServiceUnavailable, 30*time.Second)
	t.Logf("primary crashed; every instance unready after %s", time.Since(crashed).Round(time.Millisecond))
	time.Sleep(time.Until(crashed.Add(outage))) // the fault's length
	pg.promote()
	promoted := time.Now()
	d.waitReadyz(http.StatusOK, 2*time.Minute)
	t.Logf("standby promoted %s after the crash; every instance ready again %s later",
		promoted.Sub(crashed).Round(time.Millisecond), time.Since(promoted).Round(time.Millisecond))
	return promoted
}
