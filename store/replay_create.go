package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
)

// Creating a replay task: its snapshot of the selected messages, its
// skipped ids, its audit row and the command or approval it carries out,
// in one transaction; and the dry run that counts a selection instead.

// NewReplayTask is what CreateReplayTask records.
type NewReplayTask struct {
	// Selection picks the messages; its Scope must already hold the
	// caller's queue scope. Required.
	Selection Filter
	// Limit caps the selection (lowest ids first). 0 means MaxItems.
	Limit int64
	// MaxItems refuses a selection larger than this with
	// ErrSelectionTooLarge when no Limit is given. Required.
	MaxItems int64
	// Request is the accepted request in its public JSON form. Required.
	Request json.RawMessage
	// Target overrides each message's own exchange and routing key when
	// TargetExchange is set ("" is the default exchange).
	TargetExchange   *string
	TargetRoutingKey string
	RatePerSecond    float64
	StartAt          time.Time
	Force            bool
	CanaryCount      int
	CanaryWait       time.Duration
	// UnknownRetries is how often a publish whose outcome is unknown is
	// sent again (0: never: the item is settled as unknown at once).
	UnknownRetries int
	Actor          Actor
	// AuditSelection is what the audit row says was selected.
	AuditSelection any
	// CommandID, when set, names a reserved control command whose answer
	// Answer builds; it is recorded in the same transaction, so a redelivered
	// command can never create a second task.
	CommandID string
	Answer    func(ReplayTask) (string, error)
	// Approval, when set, is the approval request this task carries out:
	// approved in the task's own transaction (ErrConflict when it is no
	// longer pending), with the task's id as its result.
	Approval int64
	// Approver, with Approval, is the principal who approves it; Actor is
	// then the requester. Optional: default Actor.
	Approver Actor
	// NamedIDs, when set, says that the selection is the ids a caller
	// named (Selection.IDs): those it does not hold are items of the task
	// too, settled at once as skipped, so that the task accounts for every
	// id asked for: SkipNotFound for an id above any the store ever gave
	// (never stored: a typo), SkipDeleted for the others (deleted, or
	// outside Selection.Scope, which are not told apart).
	NamedIDs bool
	// Edit, when set, makes this the task of an edit-then-replay of the one
	// message its selection names: the edit rides on the task (never in
	// its request), and the message's edit is recorded in the same
	// transaction; ErrConflict when the message is already edited or being
	// edited.
	Edit *NewEdit
}

// NewEdit is an edit-then-replay's record.
type NewEdit struct {
	// MessageID is the edited message.
	MessageID int64
	// Edit is what the runner applies, in the replay package's form.
	Edit json.RawMessage
	// CopyReplayID is the copy's x-dlq-replay-id.
	CopyReplayID string
	// AfterTaskID is the task of the message's edit this one follows (0:
	// the first edit), as read when CopyReplayID was derived from it: an
	// edit recorded since (a concurrent one) makes this one ErrConflict,
	// so that no two edits' copies share an id.
	AfterTaskID int64
	// AuditDetail is added to the task's audit row (the diff).
	AuditDetail map[string]any
}

// CreateReplayTask records a task and its snapshot (the ids of the
// selected messages, fixed now) and writes the audit row, in one
// transaction. It returns ErrEmptySelection when nothing matches and
// ErrSelectionTooLarge when more than MaxItems match without a Limit.
func (s *Store) CreateReplayTask(ctx context.Context, n NewReplayTask) (ReplayTask, error) {
	if n.MaxItems <= 0 || len(n.Request) == 0 {
		return ReplayTask{}, errors.New("store: create replay task: MaxItems and Request are required")
	}
	tx, err := s.beginSnapshot(ctx, &n.Selection, "replay task")
	if err != nil {
		return ReplayTask{}, err
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit

	if err := approvedInTx(ctx, tx, n.Approval, approverOr(n.Approver, n.Actor)); err != nil {
		return ReplayTask{}, err
	}
	id, err := s.insertReplayTask(ctx, tx, n)
	if err != nil {
		return ReplayTask{}, err
	}
	if n.Edit != nil {
		if err := recordEdit(ctx, tx, id, *n.Edit, n.Actor); err != nil {
			return ReplayTask{}, err
		}
	}

	requested, missing, err := snapshotReplayTask(ctx, tx, n, id)
	if err != nil {
		return ReplayTask{}, err
	}
	detail := map[string]any{}
	if missing.deleted > 0 {
		detail["deleted"] = missing.deleted
	}
	if missing.notFound > 0 {
		detail["not_found"] = missing.notFound
	}
	if n.Approval > 0 {
		detail["approval_id"] = n.Approval
	}
	action := ActionReplay
	if n.Edit != nil {
		action = ActionEditReplay
		for k, v := range n.Edit.AuditDetail {
			detail[k] = v
		}
	}
	t, err := finishReplayTask(ctx, tx, n, id, requested, action, detail)
	if err != nil {
		return ReplayTask{}, err
	}
	if err := approvalResult(ctx, tx, n.Approval, map[string]any{"task_id": id, "requested": requested}); err != nil {
		return ReplayTask{}, err
	}
	if n.CommandID != "" && n.Answer != nil {
		answer, err := n.Answer(t)
		if err != nil {
			return ReplayTask{}, fmt.Errorf("store: answer command %q: %w", n.CommandID, err)
		}
		if err := saveAnswer(ctx, tx, n.CommandID, answer); err != nil {
			return ReplayTask{}, err
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return ReplayTask{}, fmt.Errorf("store: commit replay task %d: %w", id, err)
	}
	return t, nil
}

// snapshotReplayTask records the items of task id in tx: the messages its
// selection holds now and, for a selection by ids (NamedIDs), the ids it
// does not hold, already skipped (missing of them). requested counts
// both. ErrEmptySelection when the selection holds no message,
// ErrSelectionTooLarge when it holds more than MaxItems without a Limit.
func snapshotReplayTask(ctx context.Context, tx pgx.Tx, n NewReplayTask, id int64) (requested int64, missing missingIDs, err error) {
	limit := n.Limit
	if limit <= 0 {
		limit = n.MaxItems + 1 // one more to tell "exactly MaxItems" from "too many"
	}
	args := sqlArgs{id}
	cond, err := n.Selection.where(&args)
	if err != nil {
		return 0, missing, err
	}
	tag, err := tx.Exec(ctx, `
INSERT INTO replay_task_items (task_id, message_id)
SELECT $1, m.id FROM dead_messages m WHERE `+cond+`
ORDER BY m.id LIMIT `+args.add(limit), args...)
	if err != nil {
		return 0, missing, fmt.Errorf("store: snapshot replay task %d: %w", id, err)
	}
	requested = tag.RowsAffected()
	switch {
	case requested == 0:
		return 0, missing, ErrEmptySelection
	case n.Limit <= 0 && requested > n.MaxItems:
		return 0, missing, fmt.Errorf("%w: more than %d messages match; give a limit of at most %d", ErrSelectionTooLarge, n.MaxItems, n.MaxItems)
	}
	if n.NamedIDs {
		if missing, err = skipMissingIDs(ctx, tx, id, n.Selection); err != nil {
			return 0, missing, err
		}
	}
	return requested + missing.deleted + missing.notFound, missing, nil
}

// SkipDeletedDetail is the detail of an item skipped because its message
// no longer exists (ReplaySkipReasons reads it as SkipDeleted).
const SkipDeletedDetail = "deleted before it was replayed"

// SkipNotFoundDetail is the detail of an item skipped because no message
// ever had its id (ReplaySkipReasons reads it as SkipNotFound).
const SkipNotFoundDetail = "never stored: no message ever had this id (check it for a typo)"

// missingIDs counts the ids of a selection by ids that a task's snapshot
// did not take, by why.
type missingIDs struct{ deleted, notFound int64 }

// highestMessageIDSQL is the highest id the store ever gave a message (0
// before the first): an id above it was never stored, whereas one at or
// below it that is gone was, as a rule, deleted (a rolled-back ingest
// leaves rare gaps, which read as deleted too). Reading the sequence costs
// nothing, whatever the size of the table.
const highestMessageIDSQL = `coalesce(pg_sequence_last_value(pg_get_serial_sequence('dead_messages', 'id')::regclass), 0)`

// HighestMessageID returns the highest id the store ever gave a message
// (0 before the first): an id above it was never stored.
func (s *Store) HighestMessageID(ctx context.Context) (int64, error) {
	var id int64
	if err := s.pool.QueryRow(ctx, `SELECT `+highestMessageIDSQL).Scan(&id); err != nil {
		return 0, fmt.Errorf("store: read the highest message id: %w", err)
	}
	return id, nil
}

// skipMissingIDs records, in tx, the ids of a selection by ids (f) that
// the snapshot of task id did not take because f does not hold them as
// items already skipped, and counts them on the task: never stored (above
// the highest id the store gave, SkipNotFoundDetail) or else deleted
// (deleted, or outside f's scope: SkipDeletedDetail). An id the snapshot
// left out for its limit exists, and is not one of them.
func skipMissingIDs(ctx context.Context, tx pgx.Tx, id int64, f Filter) (missingIDs, error) {
	args := sqlArgs{id, SkipDeletedDetail, f.IDs, SkipNotFoundDetail}
	cond, err := f.where(&args)
	if err != nil {
		return missingIDs{}, err
	}
	var n missingIDs
	err = tx.QueryRow(ctx, `
WITH hi AS (SELECT `+highestMessageIDSQL+` AS id), s AS (
    INSERT INTO replay_task_items (task_id, message_id, outcome, detail)
    SELECT $1, x.id, 'skipped', CASE WHEN x.id > hi.id THEN $4 ELSE $2 END
    FROM (SELECT DISTINCT unnest($3::bigint[]) AS id) x CROSS JOIN hi
    WHERE NOT EXISTS (SELECT 1 FROM dead_messages m WHERE m.id = x.id AND `+cond+`)
    ON CONFLICT DO NOTHING
    RETURNING detail
), c AS (SELECT count(*) AS n, count(*) FILTER (WHERE detail = $4) AS nf FROM s)
UPDATE replay_tasks t SET skipped = t.skipped + c.n FROM c WHERE t.id = $1
RETURNING c.n - c.nf, c.nf`, args...).Scan(&n.deleted, &n.notFound)
	if err != nil {
		return missingIDs{}, fmt.Errorf("store: record the missing messages of replay task %d: %w", id, err)
	}
	return n, nil
}

// insertReplayTask inserts a task's row (scheduled, nothing requested
// yet) in tx and returns its id.
func (s *Store) insertReplayTask(ctx context.Context, tx pgx.Tx, n NewReplayTask) (int64, error) {
	var scope any
	if n.Selection.Scope != nil {
		scope = n.Selection.Scope
	}
	startAt := n.StartAt
	if startAt.IsZero() {
		startAt = time.Now()
	}
	var (
		id   int64
		edit []byte
		// reserved is the task's id when it had to be known before the
		// insert: a sealed edit is bound to it.
		reserved *int64
	)
	if n.Edit != nil {
		edit = n.Edit.Edit
		if s.enc != nil {
			if err := tx.QueryRow(ctx, `SELECT nextval(pg_get_serial_sequence('replay_tasks', 'id'))`).Scan(&id); err != nil {
				return 0, fmt.Errorf("store: reserve a replay task id: %w", err)
			}
			reserved = &id
			var err error
			if edit, err = s.enc.sealEdit(id, edit); err != nil {
				return 0, err
			}
		}
	}
	var approvalID *int64
	approvedBy := ""
	if n.Approval > 0 {
		approvalID, approvedBy = &n.Approval, approverOr(n.Approver, n.Actor).Name
	}
	err := tx.QueryRow(ctx, `
INSERT INTO replay_tasks (id, status, request, scope, target_exchange, target_routing_key, rate_per_second, force,
    canary_count, canary_wait_seconds, created_by, created_role, created_via, request_id, start_at, edit,
    approval_id, approved_by, unknown_retries)
VALUES (coalesce($15::bigint, nextval(pg_get_serial_sequence('replay_tasks', 'id'))),
    'scheduled', $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, greatest($13, now()), $14, $16, nullif($17, ''), $18)
RETURNING id`,
		n.Request, scope, n.TargetExchange, targetKey(n.TargetExchange, n.TargetRoutingKey), n.RatePerSecond, n.Force,
		n.CanaryCount, int(n.CanaryWait/time.Second), cleanText(n.Actor.Name), n.Actor.Role, n.Actor.Via,
		cleanText(n.Actor.RequestID), startAt, edit, reserved, approvalID, cleanText(approvedBy), max(n.UnknownRetries, 0)).Scan(&id)
	if err != nil {
		return 0, fmt.Errorf("store: insert replay task: %w", err)
	}
	return id, nil
}

// finishReplayTask completes a task whose items (requested of them) are
// in: it records the count, writes the audit row (action, with detail
// added to the task's own) and tells the runners, in tx.
func finishReplayTask(ctx context.Context, tx pgx.Tx, n NewReplayTask, id, requested int64, action string, extra map[string]any) (ReplayTask, error) {
	if requested >= 1000 {
		// The task's queries plan from replay_task_items' statistics, and
		// autovacuum would only notice these rows after the task ran.
		// ANALYZE in this transaction counts them.
		if _, err := tx.Exec(ctx, `ANALYZE replay_task_items`); err != nil {
			return ReplayTask{}, fmt.Errorf("store: analyze the snapshot of replay task %d: %w", id, err)
		}
	}
	t, err := scanReplayTask(tx.QueryRow(ctx, `
UPDATE replay_tasks SET requested = $2 WHERE id = $1 RETURNING `+replayTaskColumns, id, requested))
	if err != nil {
		return ReplayTask{}, fmt.Errorf("store: count replay task %d: %w", id, err)
	}
	detail := map[string]any{"task_id": id, "rate_per_second": n.RatePerSecond, "start_at": t.StartAt, "force": n.Force}
	if n.TargetExchange != nil {
		detail["target"] = map[string]string{"exchange": *n.TargetExchange, "routing_key": n.TargetRoutingKey}
	}
	if n.CanaryCount > 0 {
		detail["canary"] = map[string]any{"count": n.CanaryCount, "wait_seconds": int(n.CanaryWait / time.Second)}
	}
	for k, v := range extra {
		detail[k] = v
	}
	if err := insertAuditApproved(ctx, tx, n.Actor, t.ApprovedBy, action, n.AuditSelection, requested, detail); err != nil {
		return ReplayTask{}, err
	}
	if _, err := tx.Exec(ctx, `SELECT pg_notify('dlq_replay', current_schema() || ':start:' || $1::bigint::text)`, id); err != nil {
		return ReplayTask{}, fmt.Errorf("store: notify replay task %d: %w", id, err)
	}
	return t, nil
}

func targetKey(exchange *string, key string) *string {
	if exchange == nil {
		return nil
	}
	return &key
}

// ReplayPreview describes what a replay would select, for a dry run.
type ReplayPreview struct {
	// Matched is how many messages the selection holds (capped by the limit).
	Matched int64
	// Guarded would be skipped by the loop guard; NotPending because their
	// status is not pending.
	Guarded, NotPending int64
	// Sample holds the lowest ids, within the limit.
	Sample []int64
}

// PreviewReplay counts a selection without changing anything. limit caps
// the count (0: maxItems+1, so "more than maxItems" shows).
func (s *Store) PreviewReplay(ctx context.Context, f Filter, limit, maxItems int64, maxReplays int, sample int) (ReplayPreview, error) {
	if limit <= 0 {
		limit = maxItems + 1
	}
	f, err := s.withIndex(ctx, f)
	if err != nil {
		return ReplayPreview{}, err
	}
	args := sqlArgs{}
	cond, err := f.where(&args)
	if err != nil {
		return ReplayPreview{}, err
	}
	maxArg := args.add(maxReplays)
	limArg := args.add(limit)
	var p ReplayPreview
	err = s.pool.QueryRow(ctx, `
SELECT count(*),
       count(*) FILTER (WHERE s.status = 'pending' AND s.replay_count >= `+maxArg+`),
       count(*) FILTER (WHERE s.status <> 'pending')
FROM (SELECT m.id, m.status, m.replay_count FROM dead_messages m WHERE `+cond+` ORDER BY m.id LIMIT `+limArg+`) s`,
		args...).Scan(&p.Matched, &p.Guarded, &p.NotPending)
	if err != nil {
		return ReplayPreview{}, fmt.Errorf("store: preview replay: %w", err)
	}
	args = args[:len(args)-2]
	rows, err := s.pool.Query(ctx, `SELECT m.id FROM dead_messages m WHERE `+cond+` ORDER BY m.id LIMIT `+args.add(min(int64(sample), limit)), args...)
	if err != nil {
		return ReplayPreview{}, fmt.Errorf("store: preview replay sample: %w", err)
	}
	p.Sample, err = pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return ReplayPreview{}, fmt.Errorf("store: preview replay sample: %w", err)
	}
	return p, nil
}
