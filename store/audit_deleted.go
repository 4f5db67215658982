package store

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5"
)

// DeletionScanMax is how many of the newest audit entries
// MessageDeletion looks through by default.
const DeletionScanMax = 10000

// MessageDeletion is the delete the audit records for a message that is
// no longer stored.
type MessageDeletion struct {
	Entry AuditEntry
	// Named: the delete named the message by id (and did not report it
	// missing), so it deleted it. Otherwise its selection was a filter
	// bounded by a max_id at or above the message's id, and it may have
	// deleted it: the audit keeps a filter as asked, not the ids it
	// deleted (nor does an approval, whose snapshot goes once it ran).
	Named bool
}

// MessageDeletion finds, among the newest scan audit entries (those
// within reads, every one when nil), the delete that removed message id:
// the newest that named it, else the newest whose filter reached up to it
// (max_id >= id); ok is false when none did. The entries are read newest
// first through the primary key and stop at scan, whatever the size of
// the log.
func (s *Store) MessageDeletion(ctx context.Context, id int64, within *AuditWithin, scan int) (d MessageDeletion, ok bool, err error) {
	if scan <= 0 {
		scan = DeletionScanMax
	}
	args := sqlArgs{id, scan}
	where := "TRUE"
	if within != nil {
		where = within.where(&args)
	}
	row := s.pool.QueryRow(ctx, `
SELECT `+auditColumns+`, n.named
FROM (SELECT * FROM audit_log ORDER BY id DESC LIMIT $2) a
CROSS JOIN LATERAL (SELECT
    coalesce(a.selection->'ids' @> jsonb_build_array($1::bigint), false)
    AND NOT coalesce(a.detail->'not_found' @> jsonb_build_array($1::bigint), false) AS named) n
WHERE a.action = '`+ActionDelete+`' AND a.count > 0
  AND (n.named OR (a.selection->>'max_id')::bigint >= $1)
  AND `+where+`
ORDER BY n.named DESC, a.id DESC LIMIT 1`, args...)
	err = scanAudit(row, &d.Entry, &d.Named)
	if errors.Is(err, pgx.ErrNoRows) {
		return MessageDeletion{}, false, nil
	}
	if err != nil {
		return MessageDeletion{}, false, fmt.Errorf("store: the delete of message %d in the audit: %w", id, err)
	}
	return d, true, nil
}
