package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/crypt"
	"github.com/jackc/pgx/v5"
)

// Filter selects dead messages. It is shared by listing, bulk actions and
// replay selection so the same words mean the same rows everywhere. The JSON
// names are the public contract of the API and the control queue.
type Filter struct {
	// Status is one status, a comma list, or "all". Empty means pending.
	Status string `json:"status,omitempty"`
	// SourceQueue matches exactly.
	SourceQueue string `json:"source_queue,omitempty"`
	// Reason matches exactly: one of Reasons.
	Reason string `json:"reason,omitempty"`
	// FailedAfter and FailedBefore bound failed_at (after is inclusive,
	// before exclusive).
	FailedAfter  *time.Time `json:"failed_after,omitempty"`
	FailedBefore *time.Time `json:"failed_before,omitempty"`
	// Query is a text search over body, failure text, message id and
	// header values.
	Query string `json:"q,omitempty"`
	// Group is a failure group id.
	Group string `json:"group,omitempty"`
	// Category is a failure category (transient, permanent, unknown) or a
	// comma list of them.
	Category string `json:"category,omitempty"`
	// IDs restricts to these message ids.
	IDs []int64 `json:"ids,omitempty"`
	// Fields are conditions on JSON bodies (ParseField), all of which a
	// message must meet.
	Fields []string `json:"fields,omitempty"`
	// MaxID, when positive, selects only messages with an id up to it: a
	// snapshot bound. Ids follow arrival, so a selection the operator
	// confirmed (the web console's "all N matching") leaves out every
	// message stored after it was counted.
	MaxID int64 `json:"max_id,omitempty"`
	// ReplayTask selects the messages of one replay task's snapshot;
	// ReplayOutcome (published, failed, unknown, skipped) those of them
	// the task settled so, and ReplayError those whose recorded error (the
	// item's detail, a failed, unknown or skipped one's reason) is exactly
	// it: "the messages task T could not publish, because R". Both need
	// ReplayTask. Task visibility is the operations layer's to check; the
	// messages themselves are read within the caller's scope like any.
	ReplayTask    int64  `json:"replay_task,omitempty"`
	ReplayOutcome string `json:"replay_outcome,omitempty"`
	ReplayError   string `json:"replay_error,omitempty"`
	// Scope restricts to these source queues: the caller's permission, not
	// a user filter. Nil means every queue.
	Scope []string `json:"-"`
	// Approval restricts to the snapshot of an approval request: the ids
	// its selection matched when it was made, kept while it waits for a
	// decision. The operations layer checks that the caller sees the
	// request; the messages are read within the caller's scope like any.
	Approval int64 `json:"approval,omitempty"`
	// index is the store's index key when it seals (withIndex): q then
	// matches sealed rows by their keyed hashes, and only by those.
	index *crypt.Index
}

// withIndex gives a filter with q the index key its search needs when
// the store seals.
func (s *Store) withIndex(ctx context.Context, f Filter) (Filter, error) {
	if s.enc == nil || f.Query == "" {
		return f, nil
	}
	_, x, err := s.sealing(ctx)
	f.index = x
	return f, err
}

// beginSnapshot readies f for a snapshot of what it selects (withIndex,
// read before the transaction, not in it) and begins the transaction the
// snapshot is taken in. what names the write in the error.
func (s *Store) beginSnapshot(ctx context.Context, f *Filter, what string) (pgx.Tx, error) {
	var err error
	if *f, err = s.withIndex(ctx, *f); err != nil {
		return nil, err
	}
	tx, err := s.pool.Begin(ctx)
	if err != nil {
		return nil, fmt.Errorf("store: begin %s: %w", what, err)
	}
	return tx, nil
}

// ErrInvalidFilter wraps every filter validation error; the message names
// the field.
var ErrInvalidFilter = errors.New("invalid filter")

// CountersAnswer reports whether a view's counters (the queue summary's
// counts by status, a failure group's) answer how many messages f
// matches: the counter tables' rule (countedByTables), without a reason,
// which only the store's count reads from the groups.
func (f Filter) CountersAnswer() bool {
	return f.Reason == "" && f.countedByTables()
}

// MaxFilterIDs bounds the ids of one request.
const MaxFilterIDs = 10000

// Statuses returns the statuses the filter selects (nil for all).
func (f Filter) Statuses() ([]string, error) {
	s := strings.TrimSpace(f.Status)
	if s == "" {
		return []string{StatusPending}, nil
	}
	if s == "all" {
		return nil, nil
	}
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(Statuses, p) {
			return nil, fmt.Errorf("%w: status %q must be one of %s or all", ErrInvalidFilter, p, strings.Join(Statuses, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// Validate checks the filter and names the wrong field.
func (f Filter) Validate() error {
	if _, err := f.Statuses(); err != nil {
		return err
	}
	if f.Reason != "" && !slices.Contains(Reasons, f.Reason) {
		return fmt.Errorf("%w: reason %q must be one of %s", ErrInvalidFilter, f.Reason, strings.Join(Reasons, ", "))
	}
	if f.FailedAfter != nil && f.FailedBefore != nil && !f.FailedAfter.Before(*f.FailedBefore) {
		return fmt.Errorf("%w: failed_after (%s) must be before failed_before (%s)", ErrInvalidFilter,
			f.FailedAfter.Format(time.RFC3339), f.FailedBefore.Format(time.RFC3339))
	}
	if len(f.IDs) > MaxFilterIDs {
		return fmt.Errorf("%w: ids lists %d ids; at most %d per request", ErrInvalidFilter, len(f.IDs), MaxFilterIDs)
	}
	if f.Approval < 0 {
		return fmt.Errorf("%w: approval: %d is not an approval request id", ErrInvalidFilter, f.Approval)
	}
	if f.MaxID < 0 {
		return fmt.Errorf("%w: max_id: %d must be a message id (or 0 for no bound)", ErrInvalidFilter, f.MaxID)
	}
	for _, id := range f.IDs {
		if id <= 0 {
			return fmt.Errorf("%w: ids: %d is not a message id", ErrInvalidFilter, id)
		}
	}
	if err := f.validateReplay(); err != nil {
		return err
	}
	if len(f.Query) > 1000 {
		return fmt.Errorf("%w: q is %d bytes; at most 1000", ErrInvalidFilter, len(f.Query))
	}
	if _, err := parseFields(f.Fields); err != nil {
		return err
	}
	if f.Category != "" {
		if _, err := parseCategories(f.Category); err != nil {
			return err
		}
	}
	return nil
}

// ReplayOutcomes are the values of Filter.ReplayOutcome: the outcomes a
// task settles its items with.
var ReplayOutcomes = []string{OutcomePublished, OutcomeFailed, OutcomeUnknown, OutcomeSkipped}

func (f Filter) validateReplay() error {
	switch {
	case f.ReplayTask < 0:
		return fmt.Errorf("%w: replay_task: %d is not a replay task id", ErrInvalidFilter, f.ReplayTask)
	case f.ReplayTask == 0 && (f.ReplayOutcome != "" || f.ReplayError != ""):
		return fmt.Errorf("%w: replay_outcome and replay_error need replay_task, the task whose messages they select", ErrInvalidFilter)
	case f.ReplayOutcome != "" && !slices.Contains(ReplayOutcomes, f.ReplayOutcome):
		return fmt.Errorf("%w: replay_outcome %q must be one of %s", ErrInvalidFilter, f.ReplayOutcome, strings.Join(ReplayOutcomes, ", "))
	case f.ReplayOutcome == OutcomePublished && f.ReplayError != "":
		return fmt.Errorf("%w: replay_error: a published message recorded no error", ErrInvalidFilter)
	case len(f.ReplayError) > 10000:
		return fmt.Errorf("%w: replay_error is %d bytes; at most 10000", ErrInvalidFilter, len(f.ReplayError))
	}
	return nil
}

// replayCond renders the replay-task conditions: the ids of the task's
// items that match, each one probe of replay_task_items' primary key.
func (f Filter) replayCond(args *sqlArgs) string {
	q := "SELECT i.message_id FROM replay_task_items i WHERE i.task_id = " + args.add(f.ReplayTask)
	if f.ReplayOutcome != "" {
		q += " AND i.outcome = " + args.add(f.ReplayOutcome)
	}
	if f.ReplayError != "" {
		// A published item's detail is its replay id, not an error.
		q += " AND i.outcome <> 'published' AND i.detail = " + args.add(f.ReplayError)
	}
	return "m.id IN (" + q + ")"
}

// parseCategories reads a category or a comma list of them.
func parseCategories(s string) ([]string, error) {
	var out []string
	for _, p := range strings.Split(s, ",") {
		p = strings.TrimSpace(p)
		if !slices.Contains(Categories, p) {
			return nil, fmt.Errorf("%w: category %q must be one of %s (or a comma list of them)", ErrInvalidFilter, p, strings.Join(Categories, ", "))
		}
		out = append(out, p)
	}
	return out, nil
}

// statusIn renders "alias.status is one of statuses" with the statuses
// as SQL literals, not arguments: the listing and search indexes leave
// replaying rows out (migration 00061), and the planner uses such a
// partial index only when the query's own text proves status <>
// 'replaying', which a parameter never does once a statement's plan is
// generic. Only the four known statuses are ever written; anything else
// panics, as it would be a bug in the caller, who validates first.
func statusIn(alias string, statuses []string) string {
	lits := make([]string, len(statuses))
	for i, st := range statuses {
		if !slices.Contains(Statuses, st) {
			panic(fmt.Sprintf("store: status %q written into SQL is not one of %v", st, Statuses))
		}
		lits[i] = "'" + st + "'"
	}
	if len(lits) == 1 {
		return alias + ".status = " + lits[0]
	}
	return alias + ".status IN (" + strings.Join(lits, ", ") + ")"
}

// restingStatuses splits statuses (nil: every status) into those the
// listing and search indexes hold and whether replaying is among them
// (its rows are read through the claim index instead).
func restingStatuses(statuses []string) (resting []string, replaying bool) {
	if statuses == nil {
		statuses = Statuses
	}
	for _, st := range statuses {
		if st == StatusReplaying {
			replaying = true
		} else {
			resting = append(resting, st)
		}
	}
	return resting, replaying
}

// sqlArgs collects positional arguments.
type sqlArgs []any

func (a *sqlArgs) add(v any) string {
	*a = append(*a, v)
	return "$" + strconv.Itoa(len(*a))
}

// appendKeyConds appends the conditions on the source queue and the
// reason over the table aliased alias: dead_messages (m), or
// failure_groups (g), whose key holds both.
func (f Filter) appendKeyConds(conds []string, alias string, args *sqlArgs) []string {
	if f.SourceQueue != "" {
		conds = append(conds, alias+".source_queue = "+args.add(f.SourceQueue))
	}
	if f.Scope != nil {
		conds = append(conds, alias+".source_queue = ANY("+args.add(f.Scope)+")")
	}
	if f.Reason != "" {
		conds = append(conds, alias+".reason = "+args.add(f.Reason))
	}
	return conds
}

// appendRowConds appends the conditions on a row's own failure time, id
// and body fields, which every listing and search arm applies as they
// are.
func (f Filter) appendRowConds(conds []string, args *sqlArgs) ([]string, error) {
	if f.FailedAfter != nil {
		conds = append(conds, "m.failed_at >= "+args.add(*f.FailedAfter))
	}
	if f.FailedBefore != nil {
		conds = append(conds, "m.failed_at < "+args.add(*f.FailedBefore))
	}
	if len(f.IDs) > 0 {
		conds = append(conds, "m.id = ANY("+args.add(f.IDs)+")")
	}
	if f.MaxID > 0 {
		conds = append(conds, "m.id <= "+args.add(f.MaxID))
	}
	if f.Approval > 0 {
		conds = append(conds, "m.id IN (SELECT a.message_id FROM approval_items a WHERE a.approval_id = "+args.add(f.Approval)+")")
	}
	if f.ReplayTask > 0 {
		conds = append(conds, f.replayCond(args))
	}
	if f.Category != "" {
		// Validated before any SQL is written (Validate).
		cats, _ := parseCategories(f.Category)
		conds = append(conds, "m.category = ANY("+args.add(cats)+"::text[])")
	}
	if len(f.Fields) > 0 {
		fields, err := parseFields(f.Fields)
		if err != nil {
			return nil, err
		}
		conds = append(conds, fieldsCond(fields, args))
	}
	return conds, nil
}

// where renders the filter as SQL conditions over dead_messages aliased m,
// appending its arguments. Every value travels as an argument, never as
// SQL text.
func (f Filter) where(args *sqlArgs) (string, error) {
	return f.whereFor(args, false)
}

// whereFor is where; noBodySearch keeps q away from bodies (see
// ListOptions.NoBodySearch).
func (f Filter) whereFor(args *sqlArgs, noBodySearch bool) (string, error) {
	if err := f.Validate(); err != nil {
		return "", err
	}
	var conds []string
	statuses, _ := f.Statuses()
	if len(statuses) > 0 {
		conds = append(conds, statusIn("m", statuses))
	}
	conds = f.appendKeyConds(conds, "m", args)
	conds, err := f.appendRowConds(conds, args)
	if err != nil {
		return "", err
	}
	extra, err := f.searchConds(args, noBodySearch)
	if err != nil {
		return "", err
	}
	conds = append(conds, extra...)
	if len(conds) == 0 {
		return "TRUE", nil
	}
	return strings.Join(conds, " AND "), nil
}
