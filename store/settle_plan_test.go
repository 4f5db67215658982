package store_test

import (
	"context"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestSettlementReachesRowsByKey: a settlement reaches each row by its
// primary key, once to find it still claimed and once to update it, never
// through dead_messages_claim_owner or a scan. The planner's statistics,
// taken while nothing was being replayed, see no replaying row: on them a
// probe through the claim index looked as cheap as the primary key and
// read the whole claim for every outcome (147 ms per settlement of 500
// against 72), and a join walked every replaying row. Both the custom plan
// and the generic one that a prepared statement switches to are checked.
func TestSettlementReachesRowsByKey(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	seedPending(t, st, db, "orders", 2000)
	_, err := db.Exec(ctx, `ANALYZE dead_messages`)
	require.NoError(t, err)
	task := newTask(t, st, store.Filter{SourceQueue: "orders"})
	acquire(t, db, task.ID, "runner")
	ids := messageIDs(t, db, "TRUE")[:500]
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "claim-1", Lease: 60e9, IDs: ids, MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 500)

	// EXECUTE takes no bind parameters: the outcomes as array literals.
	idText, toks, kinds, errs := make([]string, len(ids)), make([]string, len(ids)), make([]string, len(ids)), make([]string, len(ids))
	for i, id := range ids {
		idText[i], toks[i], kinds[i], errs[i] = strconv.FormatInt(id, 10), "claim-1", store.OutcomePublished, "NULL"
	}
	array := func(s []string) string { return "'{" + strings.Join(s, ",") + "}'" }
	args := strings.Join([]string{array(idText), array(toks), array(kinds), array(errs)}, ", ")
	scan := regexp.MustCompile(`(Seq Scan|Index Scan|Index Only Scan|Bitmap Heap Scan|Bitmap Index Scan|Tid Scan|Tid Range Scan)( using (\S+))? on dead_messages`)
	for _, mode := range []string{"force_custom_plan", "force_generic_plan"} {
		tx, err := db.Begin(ctx)
		require.NoError(t, err)
		defer tx.Rollback(ctx) //nolint:errcheck // rolled back below; this is for a failed assertion
		for _, set := range []string{"plan_cache_mode = " + mode, "enable_seqscan = off"} {
			_, err = tx.Exec(ctx, `SET LOCAL `+set)
			require.NoError(t, err)
		}
		// Prepared as pgx prepares it, so that the generic plan is the
		// one a prepared statement switches to.
		_, err = tx.Exec(ctx, `PREPARE settle_plan(bigint[], text[], text[], text[]) AS `+store.SettleRowsSQL)
		require.NoError(t, err)
		rows, err := tx.Query(ctx, `EXPLAIN EXECUTE settle_plan(`+args+`)`)
		require.NoError(t, err)
		lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
		require.NoError(t, err)
		_, err = tx.Exec(ctx, `DEALLOCATE settle_plan`)
		require.NoError(t, err)
		require.NoError(t, tx.Rollback(ctx))
		plan := strings.Join(lines, "\n")
		var conds []string
		for i, line := range lines {
			f := scan.FindStringSubmatch(line)
			if f == nil {
				continue
			}
			cond := ""
			if i+1 < len(lines) {
				cond = strings.TrimSpace(lines[i+1])
			}
			require.True(t, f[1] == "Index Scan" && f[3] == "dead_messages_pkey",
				"%s: the settlement reaches dead_messages by %q; want the primary key only:\n%s", mode, f[0], plan)
			conds = append(conds, cond)
		}
		// One probe per outcome (the fence). The rows to update are then
		// probed one by one in the generic plan, which a prepared
		// statement runs from its sixth execution on; a custom plan for a
		// store this small may read the primary key whole into a hash
		// instead, which costs less here. Never a join filter: it would
		// compare every outcome with every row.
		require.Len(t, conds, 2, "%s:\n%s", mode, plan)
		require.Equal(t, "Index Cond: (id = o.id)", conds[0], "%s:\n%s", mode, plan)
		if mode == "force_generic_plan" {
			require.Equal(t, "Index Cond: (id = l.id)", conds[1], "%s:\n%s", mode, plan)
		}
		require.NotContains(t, plan, "Join Filter", "%s:\n%s", mode, plan)
	}
}

// TestSettlementWaitsForAConcurrentChange: a settlement takes no row lock
// of its own before it updates; its update fences itself. A row that
// another transaction changes while the settlement runs is re-read once
// that change commits: still claimed by the same token (a redelivery of
// its ingest batch touched it), it is settled; back to pending (it died
// again), it is left as the other transaction wrote it.
func TestSettlementWaitsForAConcurrentChange(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name, change, want string
		settled            int
	}{
		{"still claimed", `UPDATE dead_messages SET ingest_batch = 77, ingest_returns = 1 WHERE id = $1`, store.StatusReplayed, 1},
		{"died again", `UPDATE dead_messages SET status = 'pending', claim_owner = NULL, claim_expires_at = NULL, reason = 'rejected' WHERE id = $1`, store.StatusPending, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			st, dsn := dlqtest.Store(t)
			db := dlqtest.DB(t, dsn)
			ctx := context.Background()
			ids := seedPending(t, st, db, "orders", 3)
			task := newTask(t, st, store.Filter{SourceQueue: "orders"})
			acquire(t, db, task.ID, "runner")
			_, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "claim-1", Lease: 60e9, IDs: ids, MaxReplays: 5})
			require.NoError(t, err)

			// The other transaction holds the middle row, changed, while the
			// settlement starts.
			other, err := db.Begin(ctx)
			require.NoError(t, err)
			defer other.Rollback(ctx) //nolint:errcheck // committed below
			var otherPID int
			require.NoError(t, other.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&otherPID))
			_, err = other.Exec(ctx, tc.change, ids[1])
			require.NoError(t, err)

			outs := make([]store.ReplayOutcome, len(ids))
			for i, id := range ids {
				outs[i] = store.ReplayOutcome{ID: id, Token: "claim-1", Result: store.OutcomePublished}
			}
			type result struct {
				res store.SettleResult
				err error
			}
			done := make(chan result, 1)
			go func() {
				res, err := st.SettleReplayOutcomes(ctx, task.ID, outs, false)
				done <- result{res, err}
			}()
			dlqtest.Eventually(t, 10e9, func() bool {
				var waiting bool
				err := db.QueryRow(ctx, `SELECT EXISTS (SELECT 1 FROM pg_stat_activity WHERE $1 = ANY(pg_blocking_pids(pid)))`, otherPID).Scan(&waiting)
				return err == nil && waiting
			}, "the settlement should wait for the other transaction's row")
			require.NoError(t, other.Commit(ctx))
			r := <-done
			require.NoError(t, r.err)
			require.EqualValues(t, 2+tc.settled, r.res.Marked, "rows moved out of replaying by the settlement")

			var status string
			var owner *string
			require.NoError(t, db.QueryRow(ctx, `SELECT status, claim_owner FROM dead_messages WHERE id = $1`, ids[1]).Scan(&status, &owner))
			require.Equal(t, tc.want, status)
			require.Nil(t, owner)
			require.Equal(t, 2, count(t, db, "status = 'replayed' AND id <> $1", ids[1]))
		})
	}
}
