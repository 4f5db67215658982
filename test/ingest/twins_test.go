//go:build !faults

package ingest

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// TestFaultKill9Twins dead-letters thousands of identical messages (same
// body, properties, headers and death second: one fingerprint for all)
// while dlq is killed again and again. A redelivered twin cannot always be
// told from a stored one whose acknowledgement reached the broker; dlq then
// stores it again rather than risk dropping it. So: nothing lost, and any
// extra rows bounded by what was unacknowledged at each kill.
func TestFaultKill9Twins(t *testing.T) {
	const (
		n        = 9000
		rate     = 1500
		kills    = 8
		prefetch = 500
	)
	h := newHarness(t)
	h.env["DLQ_PREFETCH"] = fmt.Sprint(prefetch)
	h.env["DLQ_BATCH_SIZE"] = "250"
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	p := h.start()
	h.waitReady(p, 30*time.Second)
	pub := h.publisher(n, rate, viaDirect)
	pub.Prefix, pub.Twins, pub.TwinDeath = fmt.Sprintf("%s.twins", h.runID), true, time.Now().UTC().Truncate(time.Second)
	pub.Start(ctx)

	var trace []string
	k := 0
	for k < kills || !isClosed(pub.Done()) {
		// Right after this life's first commits: kills land between commits
		// and acknowledgements, where twins and redeliveries meet.
		h.afterNextCommit(400 * time.Millisecond)
		p.Kill9(t)
		k++
		trace = append(trace, fmt.Sprintf("kill %d: %d rows", k, h.rowCount()))
		p = h.start()
	}
	t.Logf("%s", strings.Join(trace, "; "))
	pub.Wait(t, 60*time.Second)
	h.waitReady(p, 30*time.Second)
	h.waitDrained(90 * time.Second)
	h.stopGracefully(p)
	h.requireQueuesEmpty()

	confirmed, indeterminate := h.ledger.Counts()
	rows := h.rowCount()
	// Each row is one twin; only dlq was killed, so the broker confirmed
	// (or refused) every publish for certain.
	t.Logf("twins: confirmed %d, indeterminate %d, rows %d, kills %d", confirmed, indeterminate, rows, k)
	require.Greater(t, confirmed, n*9/10, "the test did not exercise what it claims")
	require.GreaterOrEqual(t, rows, confirmed, "lost %d identical dead letters", confirmed-rows)
	extra := rows - confirmed - indeterminate
	// Two consumers each hold at most prefetch unacknowledged deliveries
	// when a kill lands; only those can come back and be stored again.
	require.LessOrEqual(t, extra, k*2*prefetch, "more extra rows than deliveries in flight at the kills")
	var n0 int
	h.query(func(ctx context.Context) error {
		return h.db.QueryRow(ctx, `SELECT count(DISTINCT fingerprint) FROM dead_messages`).Scan(&n0)
	})
	require.Equal(t, 1, n0, "every twin has the same fingerprint; otherwise this test proves nothing")
}
