package store

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Total is how many messages a filter selects. Exact says whether Value
// was counted (or read from the counter tables) or estimated.
type Total struct {
	Value int64 `json:"value"`
	Exact bool  `json:"exact"`
}

// CountOptions bound CountMessages.
type CountOptions struct {
	// NoBodySearch keeps q away from bodies (ListOptions.NoBodySearch).
	NoBodySearch bool
	// Budget bounds the counting statement. Optional; default
	// CountBudgetDefault.
	Budget time.Duration
	// Cap is the most rows counted one by one. Optional; default
	// CountCapDefault.
	Cap int64
}

// Defaults of CountOptions: an index-only count reads about a million
// entries a second, so 100,000 rows fit the budget when the rows are
// where an index puts them; when they are not, the budget ends the count.
const (
	CountBudgetDefault = 100 * time.Millisecond
	CountCapDefault    = 100_000
)

// CountMessages says how many messages f selects, without ever reading
// more than a bounded part of the table:
//
//   - a filter on status, source queue, reason and failure group only is
//     answered exactly by the counter tables (queue_summary, or
//     failure_groups when it names a reason or a group), which every
//     change adjusts in its own transaction;
//   - any other filter is counted row by row, at most opt.Cap rows within
//     opt.Budget (a statement timeout): exact when it ends below the cap;
//   - otherwise the value is an estimate: the planner's row estimate for
//     the filter, at least what was counted and at most what the counter
//     tables hold for the filter's status, queue, reason and group.
func (s *Store) CountMessages(ctx context.Context, f Filter, opt CountOptions) (Total, error) {
	if err := f.Validate(); err != nil {
		return Total{}, err
	}
	opt.Budget = cmp.Or(opt.Budget, CountBudgetDefault)
	opt.Cap = cmp.Or(opt.Cap, CountCapDefault)
	if f.countedByTables() {
		n, err := s.tableCount(ctx, f)
		return Total{Value: n, Exact: err == nil}, err
	}
	var args sqlArgs
	sel, err := countSelection(f, opt.NoBodySearch, &args)
	if err != nil {
		return Total{}, err
	}
	counted, finished, err := s.boundedCount(ctx, sel, args, opt)
	if err != nil {
		return Total{}, err
	}
	if finished && counted < opt.Cap {
		return Total{Value: counted, Exact: true}, nil
	}
	estimate, err := s.planRows(ctx, sel, args)
	if err != nil {
		return Total{}, err
	}
	keys := Filter{Status: f.Status, SourceQueue: f.SourceQueue, Reason: f.Reason, Group: f.Group, Scope: f.Scope}
	upper, err := s.tableCount(ctx, keys)
	if err != nil {
		return Total{}, err
	}
	if len(f.IDs) > 0 {
		upper = min(upper, int64(len(f.IDs)))
	}
	return Total{Value: max(min(estimate, upper), counted)}, nil
}

// countedByTables reports whether the counter tables (the queue summary,
// the failure groups' counters) answer f exactly: f narrows by status,
// source queue, scope, reason and group only. A new Filter field is
// weighed here: one the counters do not know makes their count a lie.
func (f Filter) countedByTables() bool {
	return f.FailedAfter == nil && f.FailedBefore == nil && f.Query == "" && f.Category == "" &&
		len(f.IDs) == 0 && len(f.Fields) == 0 && f.MaxID <= 0 && f.Approval <= 0 && f.ReplayTask <= 0
}

// statusColumns maps a status to its column in failure_groups.
var statusColumns = map[string]string{
	StatusPending: "g.pending", StatusReplaying: "g.replaying", StatusReplayed: "g.replayed", StatusAcknowledged: "g.acknowledged",
}

// tableCount reads how many messages have f's status, source queue,
// scope, reason and group from the counter tables; f's other fields are
// not looked at. Rows stored before failure groups existed (migration
// 00004) have none, and are not counted by reason.
func (s *Store) tableCount(ctx context.Context, f Filter) (int64, error) {
	statuses, err := f.Statuses()
	if err != nil {
		return 0, err
	}
	var (
		args  sqlArgs
		query string
	)
	if f.Reason != "" || f.Group != "" {
		if statuses == nil {
			statuses = Statuses
		}
		cols := make([]string, 0, len(statuses))
		for _, st := range statuses {
			cols = append(cols, statusColumns[st])
		}
		conds := f.appendKeyConds([]string{"TRUE"}, "g", &args)
		if f.Group != "" {
			id, err := ParseGroupID(f.Group)
			if err != nil {
				return 0, err
			}
			conds = append(conds, "g.id = "+args.add(id))
		}
		query = `SELECT coalesce(sum(` + strings.Join(cols, " + ") + `), 0)::bigint FROM failure_groups g WHERE ` + strings.Join(conds, " AND ")
	} else {
		conds := f.appendKeyConds([]string{"TRUE"}, "s", &args)
		if statuses != nil {
			conds = append(conds, "s.status = ANY("+args.add(statuses)+"::text[])")
		}
		query = `SELECT coalesce(sum(s.messages), 0)::bigint FROM queue_summary s WHERE ` + strings.Join(conds, " AND ")
	}
	var n int64
	if err := s.pool.QueryRow(ctx, query, args...).Scan(&n); err != nil {
		return 0, fmt.Errorf("store: count messages from the counter tables: %w", err)
	}
	return n, nil
}

// countSelection renders the rows f selects, one arm per status with the
// status written as a literal so that each arm can use the partial
// listing indexes (see statusIn).
func countSelection(f Filter, noBodySearch bool, args *sqlArgs) (string, error) {
	statuses, err := f.Statuses()
	if err != nil {
		return "", err
	}
	if statuses == nil {
		statuses = Statuses
	}
	arms := make([]string, 0, len(statuses))
	for _, st := range statuses {
		one := f
		one.Status = st
		w, err := one.whereFor(args, noBodySearch)
		if err != nil {
			return "", err
		}
		arms = append(arms, `SELECT 1 FROM dead_messages m WHERE `+w)
	}
	return strings.Join(arms, " UNION ALL "), nil
}

// boundedCount counts the rows of sel, at most opt.Cap of them, within
// opt.Budget. finished is false when the budget ran out first.
func (s *Store) boundedCount(ctx context.Context, sel string, args sqlArgs, opt CountOptions) (n int64, finished bool, err error) {
	tx, err := s.pool.BeginTx(ctx, pgx.TxOptions{AccessMode: pgx.ReadOnly})
	if err != nil {
		return 0, false, fmt.Errorf("store: count messages: %w", err)
	}
	defer tx.Rollback(context.WithoutCancel(ctx)) //nolint:errcheck // read-only
	// JIT compiling would spend the budget before the count starts.
	if _, err := tx.Exec(ctx, `SELECT set_config('statement_timeout', $1, true), set_config('jit', 'off', true)`,
		strconv.FormatInt(max(opt.Budget.Milliseconds(), 1), 10)); err != nil {
		return 0, false, fmt.Errorf("store: count messages: %w", err)
	}
	err = tx.QueryRow(ctx, `SELECT count(*) FROM (`+sel+` LIMIT `+strconv.FormatInt(opt.Cap, 10)+`) c`, args...).Scan(&n)
	var pe *pgconn.PgError
	switch {
	case err == nil:
		return n, true, nil
	case errors.As(err, &pe) && pe.Code == "57014" && ctx.Err() == nil:
		// query_canceled by the statement timeout, not by the caller.
		return 0, false, nil
	}
	return 0, false, fmt.Errorf("store: count messages: %w", err)
}

// planRows is the planner's estimate of how many rows sel returns.
func (s *Store) planRows(ctx context.Context, sel string, args sqlArgs) (int64, error) {
	var raw []byte
	if err := s.pool.QueryRow(ctx, `EXPLAIN (FORMAT JSON) `+sel, args...).Scan(&raw); err != nil {
		return 0, fmt.Errorf("store: estimate messages: %w", err)
	}
	var plans []struct {
		Plan struct {
			Rows float64 `json:"Plan Rows"`
		} `json:"Plan"`
	}
	if err := json.Unmarshal(raw, &plans); err != nil || len(plans) == 0 {
		return 0, fmt.Errorf("store: estimate messages: read the plan %.200s: %v", raw, err)
	}
	return int64(plans[0].Plan.Rows), nil
}
