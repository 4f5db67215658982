package store

import (
	"context"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
)

// SettleRowsSQL lets the plan test EXPLAIN the settlement's statement.
const SettleRowsSQL = settleRowsSQL

// GroupReplaysSQL lets the plan test EXPLAIN a group's replays.
const GroupReplaysSQL = groupReplaysSQL

// OldestPendingSQL lets the plan test EXPLAIN the oldest pending probe.
var OldestPendingSQL = oldestPendingSQL

// SchemaLockID lets the tests hold a schema's migration lock.
var SchemaLockID = schemaLockID

// BodyTextColumn is what ingest writes in body_text_bytes for m with text
// search on.
func BodyTextColumn(m *NewMessage) int32 { return *(&Store{text: true}).bodyTextColumn(m) }

// CopyBothWays writes the plain rows of msgs into two
// temporary tables shaped like dead_messages, with ingest's hand-written
// binary COPY and with pgx's CopyFrom of the values ingest gave it before
// (pgxPlainValues), and returns how many rows of each the other lacks.
func CopyBothWays(ctx context.Context, s *Store, msgs []NewMessage) (onlyHand, onlyPgx int, err error) {
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return 0, 0, err
	}
	defer tx.Rollback(ctx) //nolint:errcheck // a test's temporary tables
	for _, t := range []string{"copy_hand", "copy_pgx"} {
		if _, err := tx.Exec(ctx, `CREATE TEMP TABLE `+t+` (LIKE dead_messages INCLUDING DEFAULTS) ON COMMIT DROP`); err != nil {
			return 0, 0, err
		}
	}
	r := newCopyReader(len(msgs), func(c *copyBuf, i int) error { return s.copyPlain(c, &msgs[i], 42, int64(i+1)) })
	if _, err := copyRows(ctx, tx, "copy_hand", ingestColumns, r); err != nil {
		return 0, 0, fmt.Errorf("hand-written: %w", err)
	}
	src := pgx.CopyFromSlice(len(msgs), func(i int) ([]any, error) { return s.pgxPlainValues(&msgs[i], 42, int64(i+1)), nil })
	if _, err := tx.CopyFrom(ctx, pgx.Identifier{"copy_pgx"}, ingestColumns, src); err != nil {
		return 0, 0, fmt.Errorf("pgx: %w", err)
	}
	cols := make([]string, len(ingestColumns))
	for i, col := range ingestColumns {
		cols[i] = col + "::text" // json has no equality
	}
	list := strings.Join(cols, ", ")
	for _, d := range []struct {
		n        *int
		from, to string
	}{{&onlyHand, "copy_hand", "copy_pgx"}, {&onlyPgx, "copy_pgx", "copy_hand"}} {
		err := tx.QueryRow(ctx, `SELECT count(*) FROM (SELECT `+list+` FROM `+d.from+` EXCEPT ALL SELECT `+list+` FROM `+d.to+`) x`).Scan(d.n)
		if err != nil {
			return 0, 0, err
		}
	}
	return onlyHand, onlyPgx, nil
}

// pgxPlainValues are the values IngestBatch gave pgx's CopyFrom for a
// plain row before it wrote COPY's binary format itself.
func (s *Store) pgxPlainValues(m *NewMessage, batch, group int64) []any {
	keys := SearchKeys(m)
	return []any{
		nullText(m.MessageID), cleanText(m.SourceQueue), cleanText(m.SourceExchange),
		cleanText(m.SourceRoutingKey), cleanText(m.DeadLetterQueue), cleanText(m.Reason),
		m.DeathCount, nullJSON(m.Failure), nullText(m.FailureType), nullText(m.FailureMessage),
		m.Properties, m.Headers, nonNilBytes(m.Body), len(m.Body), m.FirstFailedAt, m.FailedAt,
		m.Fingerprint, batch, nullText(m.ConversionError), m.ReplayCount, group, keys, KeyHashes(keys),
		m.Returns, nullJSON(m.XDeath), categoryOf(m.Category), s.bodyTextColumn(m),
	}
}
