package store_test

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestRedeliveryMatchAfterTheTableGrew: a connection that matched
// redeliveries while dead_messages was nearly empty (dlq started on a new
// database) matches them through the index once the table has grown, as
// after a broker restart redelivers a few thousand messages into a store of
// millions. PostgreSQL keeps a prepared statement's generic plan per
// connection, costed on the table as it was when the plan was made; on a
// nearly empty table that plan is a sequential scan.
func TestRedeliveryMatchAfterTheTableGrew(t *testing.T) {
	t.Parallel()
	st, dsn, db := oneConnStore(t)

	// A redelivery of the message of an in-flight batch is matched to its
	// row: nothing new is stored.
	redeliver := func(fp int64) {
		t.Helper()
		batch, _ := ingest(t, st, msg("orders", "x", fp))
		again := msg("orders", "x", fp)
		again.Redelivered = true
		_, res := ingest(t, st, again)
		require.Equal(t, 1, res.Duplicates, "redelivery of batch %d", batch)
	}
	for i := range 8 {
		redeliver(int64(1000 + i))
	}

	growTable(t, dsn, `SELECT * FROM dead_messages ORDER BY id LIMIT 8`, 2500, `'fingerprint', m.fingerprint * 10000 + g`)
	stat := func(col string) int64 { return tableStat(t, db, "dead_messages", col) }
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_tup_ins") >= 20008 },
		"the growth's statistics did not arrive")
	before := stat("seq_tup_read")

	const more = 10
	for i := range more {
		redeliver(int64(2000 + i))
	}
	st.Close() // its statistics are written as its connection ends
	dlqtest.Eventually(t, 30*time.Second, func() bool { return stat("n_tup_ins") >= 20008+more },
		"the redeliveries' statistics did not arrive")
	read := stat("seq_tup_read") - before
	t.Logf("%d redeliveries read %d rows of dead_messages by sequential scans", more, read)
	require.Less(t, read, int64(20000), fmt.Sprintf("%d redeliveries scanned dead_messages", more))
}
