package store_test

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestGroupReplaysBoundedByIndexes: a failure group's replays are read off
// its rows whatever selected them, each status through
// dead_messages_group_status_id and the queue's repeat failures through
// dead_messages_repeat, each scan stopped by its LIMIT: never the primary
// key, nor a scan that filters out other groups' rows. The group here is
// large and older than another, the case where the planner walked the
// primary key through the newer group's rows. Messages that died again are
// found though they are older than the group's newest pending ones.
func TestGroupReplaysBoundedByIndexes(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	const older, newer = int64(101), int64(202)
	// The older group: 6,000 messages (every third acknowledged, and
	// from the thousandth on, a thousand replayed by task 9); the
	// oldest ten were published by task 7 and died again. Then 4,000
	// of the newer group, some acknowledged.
	_, err := db.Exec(ctx, `
INSERT INTO dead_messages (source_queue, dead_letter_queue, reason, properties, headers, body, body_size,
    first_failed_at, failed_at, fingerprint, group_id, status, replay_count, replay_task_id)
SELECT 'orders', 'dlq', 'rejected', '{}', '{}', '\x00', 1, now() - interval '1 hour', now() - interval '1 hour', g, `+strconv.FormatInt(older, 10)+`,
    CASE WHEN g BETWEEN 1000 AND 1999 THEN 'replayed' WHEN g % 3 = 0 THEN 'acknowledged' ELSE 'pending' END,
    CASE WHEN g BETWEEN 1000 AND 1999 OR g <= 10 THEN 1 ELSE 0 END,
    CASE WHEN g BETWEEN 1000 AND 1999 THEN 9 WHEN g <= 10 THEN 7 END
FROM generate_series(1, 6000) g ORDER BY g;
UPDATE dead_messages SET status = 'pending', failed_at = now() WHERE replay_task_id = 7;
INSERT INTO dead_messages (source_queue, dead_letter_queue, reason, properties, headers, body, body_size,
    first_failed_at, failed_at, fingerprint, group_id, status)
SELECT 'orders', 'dlq', 'rejected', '{}', '{}', '\x00', 1, now(), now(), g, `+strconv.FormatInt(newer, 10)+`,
    CASE WHEN g % 5 = 0 THEN 'acknowledged' ELSE 'pending' END
FROM generate_series(1, 4000) g ORDER BY g;
ANALYZE dead_messages`)
	require.NoError(t, err)

	const scan = 100
	r, err := st.GroupReplays(ctx, store.FormatGroupID(older), "orders", scan)
	require.NoError(t, err)
	require.Equal(t, int64(9), r.LastTaskID, "the newest task that claimed messages of the group")
	require.Equal(t, int64(10), r.FailedAgain, "older than the newest pending, found through the repeat index")
	require.Equal(t, int64(7), r.FailedAgainTask)
	require.WithinDuration(t, time.Now(), r.FailedAgainAt, time.Minute)
	require.True(t, r.Partial, "more pending messages than were read")
	all, err := st.GroupReplays(ctx, store.FormatGroupID(older), "orders", 10000)
	require.NoError(t, err)
	require.False(t, all.Partial)
	require.Equal(t, r.FailedAgain, all.FailedAgain)
	none, err := st.GroupReplays(ctx, store.FormatGroupID(newer), "orders", scan)
	require.NoError(t, err)
	require.Equal(t, store.GroupReplays{Partial: true}, none, "never replayed")

	for _, gid := range []int64{older, newer} {
		plan := explainGroupReplays(t, db, gid, scan)
		node := regexp.MustCompile(`(Seq Scan|Index Scan(?: Backward)?|Index Only Scan(?: Backward)?|Bitmap Heap Scan|Bitmap Index Scan|Tid Scan|Tid Range Scan)(?: using (\S+))? on (dead_messages\S*)`)
		var scans int
		for i, line := range plan {
			f := node.FindStringSubmatch(line)
			if f == nil {
				continue
			}
			scans++
			index := f[2] // "using": the index; a bitmap scan names its index or table after "on"
			if index == "" {
				index = f[3]
			}
			require.NotEqual(t, "Seq Scan", f[1], "group %d:\n%s", gid, strings.Join(plan, "\n"))
			require.Contains(t, []string{"dead_messages_group_status_id", "dead_messages_repeat", "dead_messages"}, index,
				"group %d: read through %q:\n%s", gid, f[0], strings.Join(plan, "\n"))
			for _, below := range plan[i+1:] {
				if !strings.HasPrefix(strings.TrimSpace(below), "Index Cond") && !strings.HasPrefix(strings.TrimSpace(below), "Filter") &&
					!strings.HasPrefix(strings.TrimSpace(below), "Rows Removed") {
					break
				}
				require.NotContains(t, below, "Rows Removed by Filter", "group %d: a scan that reads other rows:\n%s", gid, strings.Join(plan, "\n"))
			}
		}
		require.GreaterOrEqual(t, scans, 4, "one scan per branch at least:\n%s", strings.Join(plan, "\n"))
	}
}

// explainGroupReplays is the plan of GroupReplays for group gid of the
// queue orders, as it ran, with the values (as planEachTime plans it).
func explainGroupReplays(t *testing.T, db *pgxpool.Pool, gid int64, scan int) []string {
	t.Helper()
	sql := strings.NewReplacer("$1::bigint[]", "'{"+strconv.FormatInt(gid, 10)+"}'::bigint[]", "$2::text[]", "'{orders}'::text[]",
		"$3", strconv.Itoa(scan)).Replace(store.GroupReplaysSQL)
	rows, err := db.Query(context.Background(), `EXPLAIN (ANALYZE, COSTS OFF, TIMING OFF) `+sql)
	require.NoError(t, err)
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	require.NoError(t, err)
	return lines
}

// TestMessageDeletion: the audit's delete of a message no longer stored:
// one that named it by id (not one that reported it missing), run on
// approval or not, else the newest whose filter reached up to it; none
// for a filter that stopped below it, nor for another queue's reader.
func TestMessageDeletion(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	ids := seedPending(t, st, db, "orders", 6)
	admin := store.Actor{Name: "admin", Role: "admin", Via: "api"}
	del := func(f store.Filter, opt store.ActionOptions) {
		t.Helper()
		opt.Confirm = true
		_, err := st.Delete(ctx, f, admin, opt)
		require.NoError(t, err)
	}
	deletion := func(id int64) (store.MessageDeletion, bool) {
		t.Helper()
		d, ok, err := st.MessageDeletion(ctx, id, nil, 0)
		require.NoError(t, err)
		return d, ok
	}

	del(store.Filter{IDs: []int64{ids[0]}}, store.ActionOptions{})
	del(store.Filter{IDs: []int64{ids[0], ids[1]}}, store.ActionOptions{}) // ids[0] is missing by now
	d, ok := deletion(ids[0])
	require.True(t, ok)
	require.True(t, d.Named)
	require.JSONEq(t, `{"ids":[`+strconv.FormatInt(ids[0], 10)+`],"status":"all"}`, string(d.Entry.Selection), "the delete that found it")

	approval, err := st.CreateApproval(ctx, store.NewApproval{Action: store.ActionDelete, Request: json.RawMessage(`{}`),
		Selection: store.Filter{IDs: []int64{ids[2]}}, TTL: time.Hour, Actor: admin})
	require.NoError(t, err)
	del(store.Filter{Approval: approval.ID, Status: "all"}, store.ActionOptions{Approval: approval.ID,
		Approver: store.Actor{Name: "bob", Role: "admin", Via: "api"}, AuditSelection: store.Filter{IDs: []int64{ids[2]}}})
	d, ok = deletion(ids[2])
	require.True(t, ok)
	require.True(t, d.Named, "asked by id, run on approval")
	require.Equal(t, "bob", d.Entry.ApprovedBy)

	del(store.Filter{SourceQueue: "orders", MaxID: ids[4]}, store.ActionOptions{})
	d, ok = deletion(ids[3])
	require.True(t, ok)
	require.False(t, d.Named, "a filter up to a later id may have deleted it")
	_, ok = deletion(ids[5] + 1)
	require.False(t, ok, "no delete reached that id")
	_, ok, err = st.MessageDeletion(ctx, ids[3], &store.AuditWithin{Name: "ops", Queues: []string{"billing"}}, 0)
	require.NoError(t, err)
	require.False(t, ok, "not an audit row of billing's")
}
