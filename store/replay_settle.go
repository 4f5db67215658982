package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/jackc/pgx/v5"
)

// Settling replay claims: each claimed message's outcome, recorded on its
// row, its task's item and counters, and the summary counters, in one
// transaction (SettleReplayOutcomes). The claims themselves are in
// replay_claims.go.

// ReplayOutcome is how one claimed message ended.
type ReplayOutcome struct {
	ID    int64
	Token string
	// Result is OutcomePublished, OutcomeFailed, OutcomeUnknown,
	// OutcomeRetry or OutcomeReleased.
	Result string
	// Error is recorded as last_replay_error (failed, unknown, retry).
	Error string
	// ReplayID, on a published or retry outcome, is recorded in the item's
	// detail: the x-dlq-replay-id it went out with. The canary sets it, to
	// know its own publishes when they die again (CanaryDiedAgain), the
	// copies of a publish sent again included.
	ReplayID string
	// Attempt is the item's unknown count its claim read
	// (ClaimedMessage.Unknowns): the outcome is recorded for the item only
	// while it still is, so a holder whose claim was taken back (and the
	// message made ready to be sent again) cannot settle it. Above 0, the
	// publish was sent again after an unknown outcome (republished),
	// unless NotSent.
	Attempt int
	// NotSent, on a failed outcome, says that the message was refused
	// before it was published (its exchange missing, a sealed message that
	// cannot be opened, a publish error): a copy never sent is not
	// republished, whatever its Attempt.
	NotSent bool
	// CopyReplayCount, on a retry outcome, is the x-dlq-replay-count the
	// publish carried; a copy that comes back dead raises the row's
	// replay_count to it, and the message is then not sent again.
	CopyReplayCount int64
}

// SettleResult counts what SettleReplayOutcomes recorded for the task.
// Each counts only what the call changed: an outcome fenced off (its row
// or item moved on) counts in none of them.
type SettleResult struct {
	// Released rows were handed back to their task, still replaying under
	// the outcome's token until then.
	Published, Failed, Unknown, Released int64
	// Retried items await being sent again; Republished outcomes were of
	// publishes sent again.
	Retried, Republished int64
	// Marked is how many rows actually changed status; a row can be missing
	// because it died again and came back first, or because the claim was
	// taken back after its lease.
	Marked int64
}

// SettleReplayOutcomes ends claims: published messages become replayed
// (replayed_at, replay_count + 1); failed, unknown and retry ones go back
// to pending with the error recorded; released ones go back to pending
// untouched and stay unsettled for the task, and so do retry ones, their
// unknown count one higher, to be sent again. Each row changes only if it
// is still replaying under the token the outcome names, and each item only
// if its unknown count is still the outcome's Attempt. The task's items
// and counters, and the summary counters, change in the same transaction.
// canary adds the published ids to the task's canary set.
//
// finished names claims that end with these outcomes: their write-ahead
// marks are dropped in the same transaction.
func (s *Store) SettleReplayOutcomes(ctx context.Context, taskID int64, outs []ReplayOutcome, canary bool, finished ...string) (SettleResult, error) {
	if len(outs) == 0 {
		return SettleResult{}, nil
	}
	outs = slices.Clone(outs)
	slices.SortFunc(outs, func(a, b ReplayOutcome) int { return cmp.Compare(a.ID, b.ID) })
	a, err := settleArgsOf(taskID, outs)
	if err != nil {
		return SettleResult{}, err
	}
	var res SettleResult

	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return SettleResult{}, fmt.Errorf("store: begin settling replay task %d: %w", taskID, err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // no-op after commit
	moves, err := settleRows(ctx, tx, taskID, a, &res)
	if err != nil {
		return SettleResult{}, err
	}
	if err := settleItems(ctx, tx, taskID, a, canary, &res); err != nil {
		return SettleResult{}, err
	}
	if err := applyStatusDeltas(ctx, tx, moves); err != nil {
		return SettleResult{}, fmt.Errorf("store: settle replay task %d: %w", taskID, err)
	}
	if len(finished) > 0 {
		if _, err := tx.Exec(ctx, `DELETE FROM replay_claims WHERE token = ANY($1)`, finished); err != nil {
			return SettleResult{}, fmt.Errorf("store: drop claim marks of replay task %d: %w", taskID, err)
		}
	}
	if err := tx.Commit(ctx); err != nil {
		return SettleResult{}, fmt.Errorf("store: commit settling replay task %d: %w", taskID, err)
	}
	return res, nil
}

// settleArgs are a settlement's query arguments: one entry per outcome
// for the rows (settleRowsSQL), and one per outcome other than released
// for the task's items (settleItemsSQL).
type settleArgs struct {
	ids   []int64
	toks  []string
	kinds []string
	errs  []*string

	itemIDs      []int64
	itemKinds    []string
	itemDetails  []*string
	itemAttempts []int32
	itemCopies   []int64
	itemSent     []bool
}

// settleArgsOf builds the arguments of settling outs (sorted by id), and
// fails on an outcome it does not know.
func settleArgsOf(taskID int64, outs []ReplayOutcome) (settleArgs, error) {
	n := len(outs)
	a := settleArgs{ids: make([]int64, n), toks: make([]string, n), kinds: make([]string, n), errs: make([]*string, n)}
	for i, o := range outs {
		a.ids[i], a.toks[i], a.kinds[i] = o.ID, o.Token, o.Result
		var detail *string
		if o.ReplayID != "" {
			id := cleanText(o.ReplayID)
			detail = &id
		}
		switch o.Result {
		case OutcomePublished:
			// The replay id is the item's detail; the row's error is
			// cleared on publish.
		case OutcomeFailed, OutcomeUnknown:
			e := cleanText(o.Error)
			a.errs[i], detail = &e, &e
		case OutcomeRetry:
			// The row's error says why; the item keeps the copy's replay id
			// for the canary, nothing otherwise.
			e := cleanText(o.Error)
			a.errs[i] = &e
		case OutcomeReleased:
		default:
			return settleArgs{}, fmt.Errorf("store: settle replay task %d: message %d: unknown outcome %q", taskID, o.ID, o.Result)
		}
		if o.Result != OutcomeReleased {
			a.itemIDs = append(a.itemIDs, o.ID)
			a.itemKinds = append(a.itemKinds, o.Result)
			a.itemDetails = append(a.itemDetails, detail)
			a.itemAttempts = append(a.itemAttempts, int32(max(o.Attempt, 0)))
			a.itemCopies = append(a.itemCopies, o.CopyReplayCount)
			a.itemSent = append(a.itemSent, !o.NotSent)
		}
	}
	return a, nil
}

// settleRows moves a settlement's rows out of replaying (settleRowsSQL),
// counts them into res (Marked, Released), and returns the status moves
// for the counters.
func settleRows(ctx context.Context, tx pgx.Tx, taskID int64, a settleArgs, res *SettleResult) ([]StatusMove, error) {
	rows, err := tx.Query(ctx, settleRowsSQL, a.ids, a.toks, a.kinds, a.errs)
	if err != nil {
		return nil, fmt.Errorf("store: settle replay task %d: %w", taskID, err)
	}
	moves, released, err := settleMoves(rows)
	if err != nil {
		return nil, fmt.Errorf("store: settle replay task %d: %w", taskID, err)
	}
	for _, m := range moves {
		res.Marked += m.Messages
	}
	// Only the rows handed back here are released: a row whose claim was
	// taken back after its lease (RecoverExpiredReplayClaims), or that died
	// again and came back to dlq (ingest), left its claim then.
	res.Released = released
	return moves, nil
}

// settleItems records a settlement's outcomes on the task's items and
// counters (settleItemsSQL), and counts them into res. It runs after
// settleRows, whose res.Marked (the rows it moved out of replaying) it
// takes out of the claimed count.
func settleItems(ctx context.Context, tx pgx.Tx, taskID int64, a settleArgs, canary bool, res *SettleResult) error {
	err := tx.QueryRow(ctx, settleItemsSQL, taskID, nonNilIDs(a.itemIDs), nonNilStrings(a.itemKinds), a.itemDetails, res.Marked, canary,
		nonNilInt32s(a.itemAttempts), nonNilIDs(a.itemCopies), nonNilBools(a.itemSent)).
		Scan(&res.Published, &res.Failed, &res.Unknown, &res.Retried, &res.Republished)
	if err != nil && !errors.Is(err, pgx.ErrNoRows) {
		return fmt.Errorf("store: count outcomes of replay task %d: %w", taskID, err)
	}
	return nil
}

// settleItemsSQL records outcomes on the items of task $1 ($2 message ids,
// $3 outcomes, $4 details, $7 the unknown counts the claims read, $8 the
// copies' replay counts, $9 whether each was sent) and adds them to the
// task's counters, $5 the rows the settlement moved out of replaying and
// $6 whether the published ids join the canary set. It returns the counts
// it added.
const settleItemsSQL = `
WITH s AS (
    -- message_id = ANY bounds the rows the planner expects to a batch's
    -- worth: joined only, the items' statistics (every item of the task
    -- unsettled when it was created) made it hash the whole task's items
    -- on every settlement.
    UPDATE replay_task_items i SET
        outcome = CASE WHEN o.kind = 'retry' THEN NULL ELSE o.kind END,
        -- A canary's publishes keep the replay ids of every copy: any of
        -- them may die again.
        detail = CASE WHEN o.kind IN ('published', 'retry') THEN nullif(concat_ws(' ', i.detail, o.detail), '')
                      ELSE o.detail END,
        unknown_count = CASE WHEN o.kind = 'retry' THEN o.attempt + 1 ELSE i.unknown_count END,
        copy_replay_count = CASE WHEN o.kind = 'retry' THEN o.copy ELSE i.copy_replay_count END
    FROM unnest($2::bigint[], $3::text[], $4::text[], $7::int[], $8::bigint[], $9::boolean[]) AS o(id, kind, detail, attempt, copy, sent)
    WHERE i.task_id = $1 AND i.message_id = ANY($2) AND i.message_id = o.id AND i.outcome IS NULL
      AND coalesce(i.unknown_count, 0) = o.attempt
    RETURNING i.message_id, o.kind, o.attempt, o.sent
), c AS (
    SELECT count(*) FILTER (WHERE kind = 'published') AS p,
           count(*) FILTER (WHERE kind = 'failed') AS f,
           count(*) FILTER (WHERE kind = 'unknown') AS u,
           count(*) FILTER (WHERE kind = 'retry') AS r,
           -- A copy refused before it was published was not sent again.
           count(*) FILTER (WHERE attempt > 0 AND sent) AS rp,
           coalesce(array_agg(message_id) FILTER (WHERE kind = 'published'), '{}') AS pub
    FROM s
)
UPDATE replay_tasks t SET published = t.published + c.p, failed = t.failed + c.f, unknown = t.unknown + c.u,
    republished = t.republished + c.rp,
    -- claimed is the items claims settled and the rows being replayed:
    -- a row leaves it as it leaves replaying, an item joins it as it is
    -- settled (mostly the same message: no change). Released messages,
    -- and those to be sent again, leave it, to be claimed again. A row
    -- that died again and came back to dlq left it then (ingest,
    -- claimReturned): its holder's confirm or nack settles its item, and
    -- counts it back in, without moving it.
    claimed = t.claimed - $5 + c.p + c.f + c.u,
    canary_ids = CASE WHEN $6 THEN t.canary_ids || c.pub ELSE t.canary_ids END,
    updated_at = now()
FROM c WHERE t.id = $1
RETURNING c.p, c.f, c.u, c.r, c.rp`

// settleRowsSQL moves the rows of a settlement ($1 ids in id order, $2
// their claim tokens, $3 outcomes, $4 errors) out of replaying and returns
// the status moves, for the counters, each with how many of its rows were
// released. TestSettlementReachesRowsByKey holds
// its plan to primary-key probes.
const settleRowsSQL = `
WITH o AS (
    SELECT * FROM unnest($1::bigint[], $2::text[], $3::text[], $4::text[]) AS o(id, tok, kind, err)
), l AS MATERIALIZED (
    -- The outcomes whose row is still claimed by their token, each found
    -- by one primary-key probe, in id order (outs are sorted);
    -- materialized, so that the update below is planned from its result
    -- and not folded into one join the planner may start from
    -- dead_messages. The status and the owner are written so
    -- that no index can serve them: dead_messages_claim_owner (which holds
    -- only replaying rows, and whose statistics see none) looked as cheap
    -- as the primary key, and a probe through it reads every row of the
    -- claim, 500 times per settlement; joined the other way, the planner
    -- walked every replaying row of every claim in flight.
    SELECT o.id, o.tok, o.kind, o.err FROM o
    CROSS JOIN LATERAL (
        SELECT 1 FROM dead_messages d
        WHERE d.id = o.id AND (d.status || '') = 'replaying' AND (d.claim_owner || '') = o.tok
        LIMIT 1) d -- kept a probe: pulled up into a join, it read the whole table
), u AS (
    -- The update fences itself: if a row changed since the probe, it
    -- waits for that change, re-reads the row's latest version, and the
    -- status and owner conditions leave it alone if it died again or its
    -- claim was taken back. No separate row lock is needed, which saved
    -- a lock record per row.
    UPDATE dead_messages m SET
        status = CASE WHEN l.kind = 'published' THEN 'replayed' ELSE 'pending' END,
        replayed_at = CASE WHEN l.kind = 'published' THEN now() ELSE m.replayed_at END,
        replay_count = CASE WHEN l.kind = 'published' THEN m.replay_count + 1 ELSE m.replay_count END,
        last_replay_at = CASE WHEN l.kind = 'released' THEN m.last_replay_at ELSE now() END,
        last_replay_error = CASE WHEN l.kind = 'published' THEN NULL
                                 WHEN l.kind = 'released' THEN m.last_replay_error
                                 ELSE l.err END,
        claim_owner = NULL, claim_expires_at = NULL, status_changed_at = now()
    FROM l WHERE m.id = l.id AND (m.status || '') = 'replaying' AND (m.claim_owner || '') = l.tok
    RETURNING m.source_queue, coalesce(m.group_id, 0) AS group_id, m.status, m.body_size, l.kind
)
SELECT source_queue, group_id, 'replaying', status, count(*), coalesce(sum(body_size), 0)::bigint,
    count(*) FILTER (WHERE kind = 'released')
FROM u GROUP BY 1, 2, 4`

// settleMoves reads settleRowsSQL's rows: the status moves, and how many
// of the rows moved were released (handed back unpublished).
func settleMoves(rows pgx.Rows) ([]StatusMove, int64, error) {
	defer rows.Close()
	var (
		out      []StatusMove
		released int64
	)
	for rows.Next() {
		m := StatusMove{}
		var n int64
		if err := rows.Scan(&m.Queue, &m.Group, &m.From, &m.To, &m.Messages, &m.Bytes, &n); err != nil {
			return nil, 0, err
		}
		out = append(out, m)
		released += n
	}
	return out, released, rows.Err()
}

func nonNilBools(s []bool) []bool {
	if s == nil {
		return []bool{}
	}
	return s
}
