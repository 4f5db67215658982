package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/jackc/pgx/v5"
)

// ImportOrigin names where a message was first stored: the origin of that
// dlq's database (Origin) and the message's id there. Ids alone are unique
// only within one database; the pair is unique everywhere.
type ImportOrigin struct {
	Origin string `json:"origin"`
	ID     int64  `json:"id"`
}

// Origin returns the origin id of this database (migration 00072): every
// dlq serve on it shares it.
func (s *Store) Origin(ctx context.Context) (string, error) {
	var id string
	if err := s.pool.QueryRow(ctx, `SELECT id::text FROM dlq_origin`).Scan(&id); err != nil {
		return "", fmt.Errorf("store: read the origin of this database: %w", err)
	}
	return id, nil
}

// ImportMessage is one exported message on its way into this dlq.
type ImportMessage struct {
	// Message holds what the export says about the message. Its status
	// here will be pending and its replay count 0; the fields used for
	// redelivery matching (Fingerprint, Redelivered, Returns, DLQID) are
	// not read.
	Message NewMessage
	// From is where the message was first stored. Required.
	From ImportOrigin
	// DeathHistory is the message's earlier deaths, as exported. Optional.
	DeathHistory json.RawMessage
}

// ImportResult counts what an import stored.
type ImportResult struct {
	// Imported messages are new rows, pending.
	Imported int64 `json:"imported"`
	// Skipped messages were stored before: imported already (by their
	// origin and id), or, for messages first stored in this very database,
	// still there under their own id.
	Skipped int64 `json:"skipped"`
}

// importBatch bounds what one statement of an import holds: rows, and
// body bytes.
const (
	importBatchRows  = 500
	importBatchBytes = 16 << 20
)

// importColumns are the columns of the staging table, in COPY order.
var importColumns = []string{
	"message_id", "source_queue", "source_exchange", "source_routing_key", "dead_letter_queue",
	"reason", "death_count", "failure", "failure_type", "failure_message", "properties", "headers",
	"body", "body_size", "first_failed_at", "failed_at", "conversion_error", "group_id", "search_keys",
	"search_hashes", "death_history", "imported_origin", "imported_id", "x_death", "category",
	"body_text_bytes", "search_text",
}

// ImportMessages stores the messages next returns until it returns io.EOF,
// all in one transaction: any error (next's own, naming the bad line,
// among them) rolls everything back and nothing is stored. Messages go
// through a staging table in batches (COPY), then into dead_messages with
// ON CONFLICT DO NOTHING on their origin and id, so a message imported
// before, or twice in the same import, is stored once and counted as
// skipped. The counter tables (queue_summary, failure_groups,
// queue_activity) are adjusted once, just before the commit, so the rows
// ingest also updates are locked for moments, not for the whole import.
// The audit row is written in the same transaction.
func (s *Store) ImportMessages(ctx context.Context, next func() (ImportMessage, error), actor Actor) (ImportResult, error) {
	var res ImportResult
	if s.enc != nil {
		// Imported rows are written by COPY, not sealed like ingested ones:
		// with encryption at rest on they would lie in the table in clear.
		return res, fmt.Errorf("%w: import is not available while encryption at rest is on "+
			"(imported messages would be stored unsealed); import with encryption keys off, then turn them on and run dlq rekey to seal the imported rows (docs/SECURITY.md)", ErrInvalidFilter)
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return res, fmt.Errorf("store: import: begin: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	var self string
	if err := tx.QueryRow(ctx, `SELECT id::text FROM dlq_origin`).Scan(&self); err != nil {
		return res, fmt.Errorf("store: import: read the origin of this database: %w", err)
	}
	if _, err := tx.Exec(ctx, `
CREATE TEMP TABLE dlq_import (
    seq int GENERATED ALWAYS AS IDENTITY,
    message_id text, source_queue text, source_exchange text, source_routing_key text, dead_letter_queue text,
    reason text, death_count bigint, failure jsonb, failure_type text, failure_message text, properties json,
    headers json, body bytea, body_size integer, first_failed_at timestamptz, failed_at timestamptz,
    conversion_error text, group_id bigint, search_keys text[], search_hashes bigint[], death_history jsonb,
    imported_origin uuid, imported_id bigint, x_death json, category text,
    body_text_bytes integer, search_text text
) ON COMMIT DROP`); err != nil {
		return res, fmt.Errorf("store: import: create the staging table: %w", err)
	}

	im := importer{st: s, tx: tx, self: self, deltas: map[summaryKey]summaryDelta{}, groups: map[int64]*groupChange{},
		activity: map[activityKey]*activityDelta{}}
	batch := make([]ImportMessage, 0, importBatchRows)
	var bytes int
	for {
		m, err := next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return ImportResult{}, err
		}
		batch = append(batch, m)
		bytes += len(m.Message.Body)
		if len(batch) == importBatchRows || bytes >= importBatchBytes {
			if err := im.store(ctx, batch); err != nil {
				return ImportResult{}, err
			}
			batch, bytes = batch[:0], 0
		}
	}
	if err := im.store(ctx, batch); err != nil {
		return ImportResult{}, err
	}

	var b pgx.Batch
	queueSummaryDeltas(&b, im.deltas)
	queueActivityDeltas(&b, im.activity)
	if err := queueGroupChanges(&b, im.groups, nil); err != nil {
		return ImportResult{}, err
	}
	if err := tx.SendBatch(ctx, &b).Close(); err != nil {
		return ImportResult{}, fmt.Errorf("store: import: adjust the counters: %w", err)
	}
	res = ImportResult{Imported: im.imported, Skipped: im.skipped}
	detail := map[string]any{"imported": res.Imported, "skipped": res.Skipped}
	if err := insertAudit(ctx, tx, actor, ActionImport, map[string]any{"origins": im.origins()}, res.Imported, detail); err != nil {
		return ImportResult{}, fmt.Errorf("store: import: %w", err)
	}
	if err := tx.Commit(ctx); err != nil {
		return ImportResult{}, fmt.Errorf("store: import: commit: %w", err)
	}
	return res, nil
}

// importer is one import's transaction and what it has changed so far.
type importer struct {
	st                *Store
	tx                pgx.Tx
	self              string
	imported, skipped int64
	deltas            map[summaryKey]summaryDelta
	groups            map[int64]*groupChange
	activity          map[activityKey]*activityDelta
	seen              map[string]bool // origins, for the audit row
}

func (im *importer) origins() []string {
	out := make([]string, 0, len(im.seen))
	for o := range im.seen {
		out = append(out, o)
	}
	return out
}

// store writes one batch: into the staging table, then the rows not stored
// before into dead_messages.
func (im *importer) store(ctx context.Context, batch []ImportMessage) error {
	if len(batch) == 0 {
		return nil
	}
	if im.seen == nil {
		im.seen = map[string]bool{}
	}
	if err := im.stage(ctx, batch); err != nil {
		return err
	}
	stored, err := im.insertStaged(ctx, len(batch))
	if err != nil {
		return err
	}
	im.count(batch, stored)
	return nil
}

// stage replaces the staging table's rows with batch.
func (im *importer) stage(ctx context.Context, batch []ImportMessage) error {
	if _, err := im.tx.Exec(ctx, `DELETE FROM dlq_import`); err != nil {
		return fmt.Errorf("store: import: empty the staging table: %w", err)
	}
	st := im.st
	src := pgx.CopyFromSlice(len(batch), func(i int) ([]any, error) {
		im := &batch[i]
		m := &im.Message
		keys := SearchKeys(m)
		return []any{
			nullText(m.MessageID), cleanText(m.SourceQueue), cleanText(m.SourceExchange),
			cleanText(m.SourceRoutingKey), cleanText(m.DeadLetterQueue), cleanText(m.Reason),
			m.DeathCount, nullJSON(m.Failure), nullText(m.FailureType), nullText(m.FailureMessage),
			m.Properties, m.Headers, nonNilBytes(m.Body), len(m.Body), m.FirstFailedAt, m.FailedAt,
			nullText(m.ConversionError), groupID(groupKeyOf(m)), keys, KeyHashes(keys), nullJSON(im.DeathHistory),
			im.From.Origin, im.From.ID, nullJSON(m.XDeath), categoryOf(m.Category),
			st.bodyTextColumn(m), nil, // search_text: the indexer's (textindex.go)
		}, nil
	})
	if _, err := im.tx.CopyFrom(ctx, pgx.Identifier{"dlq_import"}, importColumns, src); err != nil {
		return fmt.Errorf("store: import: stage %d messages: %w", len(batch), err)
	}
	return nil
}

// insertStaged inserts the staged rows (n of them) not stored before into
// dead_messages, and returns the origins of those it inserted.
func (im *importer) insertStaged(ctx context.Context, n int) (map[ImportOrigin]bool, error) {
	cols := "message_id, source_queue, source_exchange, source_routing_key, dead_letter_queue, reason, death_count, " +
		"failure, failure_type, failure_message, properties, headers, body, body_size, first_failed_at, failed_at, " +
		"conversion_error, group_id, search_keys, search_hashes, death_history, imported_origin, imported_id, x_death, category, " +
		"body_text_bytes, search_text"
	// A message first stored here and still here is skipped too: its own
	// row stands for it. fingerprint only matters for rows of ingest
	// batches in flight, which imported rows never are.
	rows, err := im.tx.Query(ctx, `
INSERT INTO dead_messages (`+cols+`, fingerprint)
SELECT `+cols+`, 0 FROM dlq_import i
WHERE NOT (i.imported_origin = $1::uuid AND EXISTS (SELECT 1 FROM dead_messages d WHERE d.id = i.imported_id))
ORDER BY i.seq
ON CONFLICT (imported_origin, imported_id) WHERE imported_origin IS NOT NULL DO NOTHING
RETURNING id, imported_origin::text, imported_id`, im.self)
	if err != nil {
		return nil, fmt.Errorf("store: import: insert %d messages: %w", n, err)
	}
	stored := map[ImportOrigin]bool{}
	for rows.Next() {
		var (
			o  ImportOrigin
			id int64
		)
		if err := rows.Scan(&id, &o.Origin, &o.ID); err != nil {
			rows.Close()
			return nil, fmt.Errorf("store: import: read inserted rows: %w", err)
		}
		stored[o] = true
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("store: import: insert %d messages: %w", n, err)
	}
	return stored, nil
}

// count adds batch, of which insertStaged inserted the messages in
// stored, to the import's counts: imported and skipped, the status
// counters, the groups and the activity.
func (im *importer) count(batch []ImportMessage, stored map[ImportOrigin]bool) {
	// The imported rows wait above the text indexer's mark (textindex.go).
	msgs := make([]NewMessage, len(batch))
	outcomes := make([]Outcome, len(batch))
	for i := range batch {
		m := &batch[i].Message
		msgs[i] = *m
		im.seen[batch[i].From.Origin] = true
		if !stored[batch[i].From] {
			im.skipped++
			continue
		}
		// Counted once: the same message twice in an import is stored
		// once.
		delete(stored, batch[i].From)
		im.imported++
		outcomes[i] = OutcomeInserted
		groupArrival(m, im.groups, nil)
		k := summaryKey{cleanText(m.SourceQueue), StatusPending}
		d := im.deltas[k]
		d.messages++
		d.bytes += int64(len(m.Body))
		im.deltas[k] = d
	}
	ingestActivity(im.activity, msgs, outcomes)
}
