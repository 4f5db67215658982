package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// The listing's other orders (ListOptions.Sort), each a keyset over
// indexes that exist, never an OFFSET:
//
//   - SortFailed, the latest death first (failed_at, then id, both
//     descending): a replayed message that died again today comes first,
//     though its id is old. One newest-first range of
//     (source_queue, status, failed_at) per queue and status, merged: the
//     planner reads them lazily under the page's LIMIT (a Merge Append,
//     ties ordered by id as they come), so a page reads about its own
//     size plus a row or two per range, however deep it is.
//   - SortQueue, by source queue (A to Z), newest first within a queue:
//     each queue is the default listing of that queue, one after the
//     other, until the page is full.
//
// Both take the queues from queue_summary (one row per queue and status,
// never more than the queues): no index on dead_messages was added for
// them. A search (q) lists newest first only.
const (
	SortNewest = ""
	SortFailed = "failed"
	SortQueue  = "queue"
)

// sortQueuesMax bounds the queues one failed-time page merges: each is
// one range of the index to plan and read. Past it, the filter must name
// a queue.
const sortQueuesMax = 200

// SortKey is where a sorted page continues: strictly after the message
// with this key in the page's order (ListOptions.After,
// MessagePage.Last).
type SortKey struct {
	ID       int64
	FailedAt time.Time
	Queue    string
}

// ValidSort reports whether sort is a listing order.
func ValidSort(sort string) bool {
	return sort == SortNewest || sort == SortFailed || sort == SortQueue
}

// eachSortedPage is EachMessage for the orders other than newest first.
func (s *Store) eachSortedPage(ctx context.Context, f Filter, opt ListOptions, fn func(Message) error) (more bool, last SortKey, err error) {
	limit := cmp.Or(opt.Limit, ListLimitDefault)
	if limit < 1 || limit > ListLimitMax {
		return false, SortKey{}, fmt.Errorf("%w: limit %d must be from 1 to %d", ErrInvalidFilter, limit, ListLimitMax)
	}
	if err := f.Validate(); err != nil {
		return false, SortKey{}, err
	}
	if f.Query != "" {
		return false, SortKey{}, fmt.Errorf("%w: sort: a search (q) lists newest first only", ErrInvalidFilter)
	}
	queues, err := s.listQueues(ctx, f)
	if err != nil {
		return false, SortKey{}, err
	}
	// The page is read one row past its size, to know whether more follow.
	var (
		n    int
		keys []SortKey
	)
	page := func(m Message) error {
		n++
		if n > limit {
			more = true
			return errPageFull
		}
		keys = append(keys, SortKey{ID: m.ID, FailedAt: m.FailedAt, Queue: m.SourceQueue})
		return fn(m)
	}
	switch opt.Sort {
	case SortFailed:
		err = s.eachByFailedAt(ctx, f, queues, opt, limit, page)
	case SortQueue:
		err = s.eachByQueue(ctx, f, queues, opt, limit, page)
	default:
		return false, SortKey{}, fmt.Errorf("%w: sort %q must be %q or %q (or empty: newest first)", ErrInvalidFilter, opt.Sort, SortFailed, SortQueue)
	}
	if err != nil && !errors.Is(err, errPageFull) {
		return false, SortKey{}, err
	}
	if more && len(keys) > 0 {
		last = keys[len(keys)-1]
	}
	return more, last, nil
}

// errPageFull ends a sorted page's reading once it has its rows.
var errPageFull = errors.New("page full")

// listQueues is the source queues a sorted listing of f reads, in order:
// the filter's queue, the failure group's, or every queue of the summary
// within scope.
func (s *Store) listQueues(ctx context.Context, f Filter) ([]string, error) {
	var args sqlArgs
	conds := []string{"TRUE"}
	if f.SourceQueue != "" {
		conds = append(conds, "s.source_queue = "+args.add(f.SourceQueue))
	}
	if f.Scope != nil {
		conds = append(conds, "s.source_queue = ANY("+args.add(f.Scope)+")")
	}
	if f.Group != "" {
		// A group lives in one queue: only that queue is read.
		gid, err := ParseGroupID(f.Group)
		if err != nil {
			return nil, err
		}
		conds = append(conds, "s.source_queue = (SELECT g.source_queue FROM failure_groups g WHERE g.id = "+args.add(gid)+")")
	}
	rows, err := s.pool.Query(ctx, `SELECT s.source_queue FROM queue_summary s WHERE `+strings.Join(conds, " AND ")+`
GROUP BY s.source_queue ORDER BY s.source_queue COLLATE "C"`, args...)
	if err != nil {
		return nil, fmt.Errorf("store: list the queues of a sorted listing: %w", err)
	}
	queues, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return nil, fmt.Errorf("store: list the queues of a sorted listing: %w", err)
	}
	return queues, nil
}

// eachByFailedAt reads a page by failed_at then id, both descending, after
// opt.After: a newest-first range of (source_queue, status, failed_at)
// per queue and resting status (each status a literal, as the partial
// index needs), the replaying rows apart (through the claim index), and
// the newest limit+1 of their union. Each range is in the index's order,
// failed_at alone, and stops after limit+1 rows and those tied with the
// last (WITH TIES: a range cut inside a tie could leave out a row the page
// needs); PostgreSQL merges the ranges lazily (Merge Append) and orders
// each run of equal failed_at by id as it comes (Incremental Sort). A
// range sorted by (failed_at, id) itself would read a batch of 32 rows
// per range at least.
func (s *Store) eachByFailedAt(ctx context.Context, f Filter, queues []string, opt ListOptions, limit int, fn func(Message) error) error {
	if len(queues) == 0 {
		return nil
	}
	if len(queues) > sortQueuesMax {
		return fmt.Errorf("%w: sort by failed time merges at most %d queues; %d match: choose a source queue", ErrInvalidFilter, sortQueuesMax, len(queues))
	}
	statuses, err := f.Statuses()
	if err != nil {
		return err
	}
	resting, replaying := restingStatuses(statuses)
	base := f
	base.Status = "all"
	var args sqlArgs
	where, err := base.where(&args)
	if err != nil {
		return err
	}
	if !opt.After.FailedAt.IsZero() {
		t, id := args.add(opt.After.FailedAt), args.add(opt.After.ID)
		// The first condition bounds the index range; the second is the
		// keyset itself.
		where += " AND m.failed_at <= " + t + " AND (m.failed_at, m.id) < (" + t + "::timestamptz, " + id + "::bigint)"
	}
	n := args.add(limit + 1)
	var arms []string
	for _, q := range queues {
		qa := args.add(q)
		for _, st := range resting {
			arms = append(arms, `(SELECT m.id, m.failed_at FROM dead_messages m WHERE m.source_queue = `+qa+` AND `+statusIn("m", []string{st})+
				` AND `+where+` ORDER BY m.failed_at DESC FETCH FIRST `+n+` ROWS WITH TIES)`)
		}
	}
	if replaying {
		arms = append(arms, `(SELECT m.id, m.failed_at FROM dead_messages m WHERE `+statusIn("m", []string{StatusReplaying})+
			` AND m.source_queue = ANY(`+args.add(queues)+`) AND `+where+` ORDER BY m.failed_at DESC FETCH FIRST `+n+` ROWS WITH TIES)`)
	}
	if len(arms) == 0 {
		return nil
	}
	query := `SELECT ` + listColumns(opt) + ` FROM (SELECT u.id, u.failed_at FROM (` + strings.Join(arms, " UNION ALL ") + `) u
ORDER BY u.failed_at DESC, u.id DESC LIMIT ` + n + `) p JOIN dead_messages m ON m.id = p.id
ORDER BY p.failed_at DESC, p.id DESC`
	// Planning a range per queue and status costs more than running them
	// (61 ranges: 10-50 ms to plan, a few ms to run, at a million
	// messages), and PostgreSQL keeps planning each execution anew when
	// it cannot tell a generic plan is as good. It is: each range is the
	// same index scan whatever the queue's name, so the statement (the
	// same text for the same filter) is planned once per connection. The
	// generic plan's estimate (the page's size unknown) passes the JIT
	// threshold, and compiling it takes a second: JIT is off for it, as
	// for a search.
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return fmt.Errorf("store: list messages: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	for _, set := range []string{`SET LOCAL plan_cache_mode = force_generic_plan`, `SET LOCAL jit = off`} {
		if _, err := tx.Exec(ctx, set); err != nil {
			return fmt.Errorf("store: list messages: %w", err)
		}
	}
	return eachRow(ctx, tx, query, args, opt.IncludeBody, fn)
}

// eachByQueue reads a page by source queue, newest first within each:
// the default listing of each queue from opt.After's on, until the page
// has limit+1 rows.
func (s *Store) eachByQueue(ctx context.Context, f Filter, queues []string, opt ListOptions, limit int, fn func(Message) error) error {
	read := 0
	for _, q := range queues {
		if opt.After.Queue != "" && q < opt.After.Queue {
			continue
		}
		fq, oq := f, opt
		fq.SourceQueue, oq.Sort, oq.After = q, SortNewest, SortKey{}
		oq.Before, oq.Limit = 0, min(limit+1-read, ListLimitMax)
		if q == opt.After.Queue {
			oq.Before = opt.After.ID
		}
		_, _, err := s.EachMessage(ctx, fq, oq, func(m Message) error {
			read++
			return fn(m)
		})
		if err != nil {
			return err
		}
		if read > limit {
			break
		}
	}
	return nil
}

// eachRow runs query and hands each message to fn.
func eachRow(ctx context.Context, db pgx.Tx, query string, args sqlArgs, withBody bool, fn func(Message) error) error {
	rows, err := db.Query(ctx, query, args...)
	if err != nil {
		return fmt.Errorf("store: list messages: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		m, err := scanMessage(rows, withBody)
		if err != nil {
			return fmt.Errorf("store: list messages: read row: %w", err)
		}
		if err := fn(m); err != nil {
			return err
		}
	}
	return rows.Err()
}
