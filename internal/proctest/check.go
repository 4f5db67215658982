package proctest

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// Retry runs fn, each try bounded by 60 s, until it succeeds; past
// patience it fails the test with fn's last error. The process tests read
// PostgreSQL through it while a fault test restarts it or a failover
// promotes a standby.
func Retry(t testing.TB, patience time.Duration, fn func(ctx context.Context) error) {
	t.Helper()
	deadline := time.Now().Add(patience)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		err := fn(ctx)
		cancel()
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			require.NoError(t, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// Tally is the checker's verdict.
type Tally struct {
	Confirmed, Indeterminate   int
	Rows                       int
	Lost, Duplicated           int
	Unexpected                 int
	IndeterminateStored        int
	ConversionErrors, BadIDRow int
	Nacks                      int
	// LostSample names a few of the lost ids (at most five), for the
	// failure message: which publish, and so which path, lost one.
	LostSample []string
}

func (c Tally) String() string {
	s := fmt.Sprintf("confirmed=%d indeterminate=%d (stored %d, nacks %d) rows=%d lost=%d duplicated=%d unexpected=%d conversion_errors=%d message_id_mismatch=%d",
		c.Confirmed, c.Indeterminate, c.IndeterminateStored, c.Nacks, c.Rows, c.Lost, c.Duplicated, c.Unexpected, c.ConversionErrors, c.BadIDRow)
	if len(c.LostSample) > 0 {
		s += fmt.Sprintf(" (lost ids include %s)", strings.Join(c.LostSample, ", "))
	}
	return s
}

// Check reads every row of dead_messages in pool's schema back and counts
// it against the ledger. The id is what the body holds before its first
// "|", as Publisher writes it.
func Check(ctx context.Context, pool *pgxpool.Pool, l *Ledger) (Tally, error) {
	var c Tally
	seen := map[string]int{}
	rows, err := pool.Query(ctx, `SELECT message_id, substring(body FROM 1 FOR 64), conversion_error IS NOT NULL FROM dead_messages`)
	if err != nil {
		return c, err
	}
	defer rows.Close()
	for rows.Next() {
		var mid *string
		var head []byte
		var convErr bool
		if err := rows.Scan(&mid, &head, &convErr); err != nil {
			return c, err
		}
		c.Rows++
		if convErr {
			c.ConversionErrors++
		}
		id, _, _ := bytes.Cut(head, []byte("|"))
		if mid != nil && *mid != string(id) {
			c.BadIDRow++
		}
		seen[string(id)]++
	}
	if err := rows.Err(); err != nil {
		return c, err
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	c.Confirmed, c.Indeterminate, c.Nacks = len(l.confirmed), len(l.indeterminate), l.nacks
	for id := range l.confirmed {
		if seen[id] == 0 {
			c.Lost++
			if len(c.LostSample) < 5 {
				c.LostSample = append(c.LostSample, id)
			}
		}
	}
	for id, n := range seen {
		if n > 1 {
			c.Duplicated++
		}
		switch {
		case l.confirmed[id]:
		case l.indeterminate[id]:
			c.IndeterminateStored++
		default:
			c.Unexpected++
		}
	}
	return c, nil
}

// RequireExact fails the test unless nothing was lost, duplicated or
// unexpected, every row's message_id agrees with its body and none was
// stored raw. explain, when not nil, runs first if something was
// duplicated.
func RequireExact(t testing.TB, c Tally, explain func()) {
	t.Helper()
	t.Logf("checker: %s", c)
	if c.Duplicated > 0 && explain != nil {
		explain()
	}
	require.Zero(t, c.Lost, "lost: %s", c)
	require.Zero(t, c.Duplicated, "duplicated: %s", c)
	require.Zero(t, c.Unexpected, "unexpected: %s", c)
	require.Zero(t, c.BadIDRow, "rows whose message_id disagrees with their body: %s", c)
	require.Zero(t, c.ConversionErrors, "rows stored raw: %s", c)
}

// ExplainDuplicates describes, for a few ids stored more than once, each
// row's ingest batch, when it was received and when its batch committed,
// and which consumer wrote it (ingest_inflight keeps batches whose
// acknowledgement was never confirmed): enough to tell a redelivery
// matched too early from one that found no candidate left.
func ExplainDuplicates(ctx context.Context, pool *pgxpool.Pool, limit int) (string, error) {
	rows, err := pool.Query(ctx, `
WITH r AS (
    SELECT id, split_part(convert_from(substring(body FROM 1 FOR 64), 'UTF8'), '|', 1) AS key,
           ingest_batch, failed_at
    FROM dead_messages
), d AS (
    SELECT key FROM r GROUP BY key HAVING count(*) > 1 ORDER BY key LIMIT $1
)
SELECT r.key, r.id, coalesce(r.ingest_batch, 0), r.failed_at,
       coalesce(f.consumer, ''), f.committed_at
FROM r JOIN d USING (key) LEFT JOIN ingest_inflight f ON f.batch_id = r.ingest_batch
ORDER BY r.key, r.id`, limit)
	if err != nil {
		return "", err
	}
	defer rows.Close()
	var b strings.Builder
	for rows.Next() {
		var key, consumer string
		var id, batch int64
		var failedAt time.Time
		var committed *time.Time
		if err := rows.Scan(&key, &id, &batch, &failedAt, &consumer, &committed); err != nil {
			return "", err
		}
		c := "not in ingest_inflight"
		if committed != nil {
			c = "committed " + committed.Format("15:04:05.000000") + " by " + consumer
		}
		fmt.Fprintf(&b, "  %s row %d batch %d received %s, %s\n", key, id, batch, failedAt.Format("15:04:05.000000"), c)
	}
	return b.String(), rows.Err()
}
