package store

// The ids of one page of a search (q): the parts of the search, each
// read through its own index, and their union (searchIDs); the walk to a
// key thousands of messages share (walkKey); and the text documents'
// part (textDocArm). ListMessages (messages.go) runs them.

import (
	"context"
	"fmt"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5"
)

// searchIDs renders the ids of one page of a search: each part of q (see
// search.go) is its own newest-first query with the plan that suits it,
// and the page is the newest limit+1 of their union. One OR of the parts
// would leave the planner a single plan for all, and walking the whole
// table for a rare key is what it would too often choose.
//
//   - keys: the GIN index on the keys' hashes (search_hashes);
//   - failure groups whose type or pattern contains q literally: every
//     message of such a group matches, so each group's newest ids come
//     from its (group_id, status, id) index alone, without reading rows;
//     the filter's queue, reason, scope and group apply to the groups;
//   - groups whose pattern matches q only once q's variable parts are
//     masked ("took 1500ms" in "took <n>ms"): their messages that have
//     q's variable values among their keys (GIN), then checked;
//   - the body, with a source queue: a scan of that queue.
//
// Those indexes leave replaying rows out (migration 00061), so each of
// these parts reads the other statuses only, and says status <>
// 'replaying' in its own text for the planner; when the filter wants
// replaying rows, one more part reads them all (a few per running task,
// through the claim index) and checks the whole of q on each.
func searchIDs(f Filter, sq searchQuery, opt ListOptions, limit int, keyIDs []int64, args *sqlArgs) (string, error) {
	base := f
	base.Query = ""
	statuses, _ := f.Statuses()
	resting, replaying := restingStatuses(statuses)
	n := args.add(limit + 1)
	var before string
	if opt.Before > 0 {
		before = " AND m.id < " + args.add(opt.Before)
	}
	var arms []string
	if len(resting) > 0 {
		a, err := restingSearchArms(base, resting, sq, opt, n, before, keyIDs, args)
		if err != nil {
			return "", err
		}
		arms = append(arms, a...)
	}
	if replaying {
		statusFree := base
		statusFree.Status = "all"
		w, err := statusFree.where(args)
		if err != nil {
			return "", err
		}
		arms = append(arms, `(SELECT m.id FROM dead_messages m WHERE `+statusIn("m", []string{StatusReplaying})+` AND `+w+before+
			` AND `+sq.matches(args, f.SourceQueue != "" && !opt.NoBodySearch, !opt.NoBodySearch)+`
		  ORDER BY m.id DESC LIMIT `+n+`)`)
	}
	return `SELECT u.id FROM (` + strings.Join(arms, " UNION ") + `) u ORDER BY u.id DESC LIMIT ` + n, nil
}

// restingSearchArms renders searchIDs' parts over the statuses the
// listing and search indexes hold (resting, never replaying). n is the
// placeholder of the page's row limit, before the keyset condition.
//
// The parts render in a fixed order, each adding its arguments as it
// goes: a placeholder no statement uses is an error, so a part adds its
// arguments only when it is in the page.
func restingSearchArms(base Filter, resting []string, sq searchQuery, opt ListOptions, n, before string, keyIDs []int64, args *sqlArgs) ([]string, error) {
	r := &restingArms{base: base, resting: resting, sq: sq, opt: opt, n: n, before: before, args: args}
	keyArm, err := r.keyArm(keyIDs)
	if err != nil {
		return nil, err
	}
	if sq.index != nil {
		// Failure text and bodies are sealed: q matches keys only. (Before
		// the other arms render: an argument no statement uses is an
		// error.)
		return []string{keyArm}, nil
	}
	if err := r.groupConds(); err != nil {
		return nil, err
	}
	arms := []string{
		keyArm,
		r.perGroup(`SELECT g.id FROM failure_groups g WHERE ` + r.gWhere + ` AND ` + r.whole),
	}
	if sq.hasText {
		a, err := r.textArms(keyIDs == nil)
		if err != nil {
			return nil, err
		}
		arms = append(arms, a...)
	}
	if len(sq.values) > 0 {
		a, err := r.partialArm()
		if err != nil {
			return nil, err
		}
		arms = append(arms, a)
	}
	if base.SourceQueue != "" && !opt.NoBodySearch {
		a, err := r.bodyArms()
		if err != nil {
			return nil, err
		}
		arms = append(arms, a...)
	}
	return arms, nil
}

// restingArms is what restingSearchArms' parts share while they render.
type restingArms struct {
	base      Filter
	resting   []string
	sq        searchQuery
	opt       ListOptions
	n, before string
	args      *sqlArgs

	keyWhereSQL string   // keyWhere, once rendered
	rowConds    []string // groupConds': on a row of a failure group
	gWhere      string   // groupConds': on the failure group g
	whole       string   // sq.wholeGroups, rendered by groupConds
}

// keyWhere renders the filter with its status written so that no index
// can serve it, so the planner never ANDs the GIN bitmap with millions of
// (status, id) entries; status <> 'replaying' is what lets the planner
// use the GIN index, whose predicate it is, and no B-tree can use it.
// Rendered when first used: a placeholder no statement uses is an error.
func (r *restingArms) keyWhere() (string, error) {
	if r.keyWhereSQL != "" {
		return r.keyWhereSQL, nil
	}
	statusFree := r.base
	statusFree.Status = "all"
	w, err := statusFree.where(r.args)
	if err != nil {
		return "", err
	}
	w += " AND m.status <> 'replaying' AND (m.status || '') = ANY(" + r.args.add(r.resting) + "::text[])" + r.before
	r.keyWhereSQL = w
	return w, nil
}

// keyArm renders the keys' part. A rare key (a message id, a trace id) is
// read through the GIN index; a key thousands of messages share was walked
// to already (keyIDs, see walkKey).
func (r *restingArms) keyArm(keyIDs []int64) (string, error) {
	if keyIDs != nil {
		return `(SELECT unnest(` + r.args.add(keyIDs) + `::bigint[]) AS id)`, nil
	}
	kw, err := r.keyWhere()
	if err != nil {
		return "", err
	}
	return `(SELECT m.id FROM dead_messages m WHERE ` + kw + ` AND ` + r.sq.hasKeys(r.args, "m", r.sq.key) + `
		  ORDER BY m.id DESC LIMIT ` + r.n + `)`, nil
}

// groupConds renders the conditions the failure groups' parts share: on a
// row, those a failure group does not already decide (rowConds); on the
// group, whose key holds the queue and the reason (gWhere); and the
// groups every message of which matches q (whole: searchQuery's, which
// matches, the same search as a condition on one row, uses too).
func (r *restingArms) groupConds() error {
	rowConds := []string{"m.group_id = gid"}
	if r.before != "" {
		rowConds = append(rowConds, strings.TrimPrefix(r.before, " AND "))
	}
	rowConds, err := r.base.appendRowConds(rowConds, r.args)
	if err != nil {
		return err
	}
	r.rowConds = rowConds
	groupConds := r.base.appendKeyConds([]string{"TRUE"}, "g", r.args)
	if r.base.Group != "" {
		id, err := ParseGroupID(r.base.Group)
		if err != nil {
			return err
		}
		groupConds = append(groupConds, "g.id = "+r.args.add(id))
	}
	r.gWhere = strings.Join(groupConds, " AND ")
	r.whole = r.sq.wholeGroups(r.args)
	return nil
}

// perGroup renders one newest-first range of (group_id, status, id) per
// group of groups (a query of their ids) and status, each status a
// literal so that the partial index serves it.
func (r *restingArms) perGroup(groups string) string {
	per := make([]string, 0, len(r.resting))
	for _, st := range r.resting {
		per = append(per, `(SELECT m.id FROM dead_messages m WHERE `+statusIn("m", []string{st})+` AND `+strings.Join(r.rowConds, " AND ")+`
		      ORDER BY m.id DESC LIMIT `+r.n+`)`)
	}
	return `(SELECT x.id FROM unnest(ARRAY(` + groups + `)) AS gid
		  CROSS JOIN LATERAL (` + strings.Join(per, " UNION ALL ") + `) x)`
}

// textArms renders the words' parts, across every queue: the documents'
// GIN index (message_text), then the newest rows still waiting for theirs
// (textindex.go), read one by one through the primary key. askIndex is
// textDocArm's.
func (r *restingArms) textArms(askIndex bool) ([]string, error) {
	kw, err := r.keyWhere()
	if err != nil {
		return nil, err
	}
	sq, opt, n := r.sq, r.opt, r.n
	tsq := sq.text.sql(r.args)
	return []string{textDocArm(tsq, kw, r.before, n, sq.walk, askIndex, !opt.NoBodySearch),
		`(SELECT m.id FROM dead_messages m WHERE m.id = ANY(` + textTailSQL() + `) AND ` + kw +
			` AND m.enc_key_id IS NULL AND m.body_text_bytes IS NOT NULL AND ` + bodyTextSQL("m") + ` @@ ` + tsq + sq.bodyless("m", tsq, !opt.NoBodySearch) + `
		  ORDER BY m.id DESC LIMIT ` + n + `)`}, nil
}

// partialArm renders the part of the groups q matches only once its
// variable parts are masked: their messages having q's values among their
// keys, read through the GIN index alone, then checked. The EXISTS is a
// one-time filter: with no such group, the keyed rows are not even read.
func (r *restingArms) partialArm() (string, error) {
	kw, err := r.keyWhere()
	if err != nil {
		return "", err
	}
	partial := `SELECT g.id FROM failure_groups g WHERE ` + r.gWhere + ` AND ` + r.sq.partialGroups(r.args, r.whole)
	return `(SELECT m.id FROM ` + r.keyed(r.sq.values) + `
		  WHERE EXISTS (` + partial + `) AND m.group_id = ANY(ARRAY(` + partial + `)) AND ` + kw + ` AND ` + r.sq.failureText(r.args, "m") + `
		  ORDER BY m.id DESC LIMIT ` + r.n + `)`, nil
}

// keyed reads the messages having keys through the GIN index alone:
// OFFSET 0 fences the subquery, so the planner cannot AND the bitmap with
// (group_id, status, id), whose millions of entries cost far more than
// checking the few rows with q's values.
func (r *restingArms) keyed(keys []string) string {
	return `(SELECT * FROM dead_messages k WHERE k.status <> 'replaying' AND ` + r.sq.hasKeys(r.args, "k", keys...) + ` OFFSET 0) m`
}

// bodyArms renders the body's parts, a scan of the filter's source queue.
//
// With a time bound, "m.id + 0" keeps the planner from walking the
// queue's id index (which ignores the bound and may read the whole queue
// looking for a rare phrase): it reads the rows in the time range through
// (source_queue, status, failed_at) instead, one range per status (every
// status is spelled out), then sorts them.
//
// One query per status: a condition equal to the index's own predicate
// (all three resting statuses) is dropped from its index conditions, and
// the time range, behind the status column, would then bound nothing: the
// queue's whole span would be read.
func (r *restingArms) bodyArms() ([]string, error) {
	order := "m.id"
	if r.base.FailedAfter != nil {
		order = "m.id + 0"
	}
	body := r.args.add(r.sq.body)
	arms := make([]string, 0, len(r.resting))
	for _, st := range r.resting {
		one := r.base
		one.Status = st
		where, err := one.where(r.args)
		if err != nil {
			return nil, err
		}
		arms = append(arms, `(SELECT m.id FROM dead_messages m WHERE `+where+r.before+` AND position(`+body+`::bytea IN m.body) > 0
		  ORDER BY `+order+` DESC LIMIT `+r.n+`)`)
	}
	return arms, nil
}

// TextWalkDefault is how many of the newest documents a text search
// reads one by one before it asks the GIN index (textDocArm,
// Config.TextWalk).
const TextWalkDefault = 20000

// textDocArm renders the documents' part of a text search: the newest
// matches of tsq (rendered) among rows meeting kw, n at most. It reads
// the newest walkRows documents one by one first, and asks the GIN index
// only about older ones, and only when those did not give n matches.
//
// Why: the index answers a rare word at once, but for a word in one
// message of a hundred ("deadlock detected", a common exception) it hands
// every match over the whole table to be read, checked again (phrases)
// and joined before the newest n are sorted out: 80,000 rows, 0.8-4 s at
// 10 million messages (docs/BENCHMARKS.md, API latencies). The planner
// cannot choose between the two ways itself: it takes a phrase's words
// for independent and estimates a handful of rows. The walk costs a rare
// word about 50 ms at 10 million; a word in one message of 200 or more
// is answered by the walk alone. The walk's subqueries are fenced (OFFSET
// 0): the inner one so that the planner cannot answer it from the GIN
// index, the outer one so that only matches are joined; the two
// parts cover disjoint id ranges, newest first, so UNION ALL under LIMIT
// keeps their order and stops before the index is asked when the walk
// found enough.
//
// Without askIndex the walk is all: q is a key (a whole header value, an
// id) that a thousand messages or more share (walkKey), whose messages
// fill the pages; its words are then common in the documents too
// ("tenant-42" is the words tenant and 42, one in every message and one
// in hundreds), and asking the index about them read 20,000 matches,
// 1-5 s at 10 million. Older messages with those words only in their
// text, not as the key, are then not listed (docs/API.md, Search).
// (The aliases beginning with walk name the walk's
// bounded reads in plans: api's search plan test tells them by them.)
func textDocArm(tsq, kw, before, n string, walkRows int, askIndex, bodyText bool) string {
	walk := `SELECT walk_ids.id FROM message_text walk_ids WHERE TRUE` + strings.Replace(before, "m.id", "walk_ids.id", 1) +
		` ORDER BY walk_ids.id DESC LIMIT ` + strconv.Itoa(walkRows)
	walked := `(SELECT walked.id FROM (SELECT walk_docs.id FROM (SELECT t.id, t.document FROM (` + walk + `) walk
		    JOIN message_text t ON t.id = walk.id OFFSET 0) walk_docs WHERE ` + textDocMatch("walk_docs", tsq, bodyText) + ` OFFSET 0) walked
		    JOIN dead_messages m ON m.id = walked.id
		  WHERE ` + kw + ` AND m.enc_key_id IS NULL
		  ORDER BY walked.id DESC)`
	if !askIndex {
		return `(SELECT x.id FROM ` + walked + ` x LIMIT ` + n + `)`
	}
	return `(SELECT x.id FROM (` + walked + `
		UNION ALL (SELECT t.id FROM message_text t JOIN dead_messages m ON m.id = t.id
		  WHERE ` + textDocMatch("t", tsq, bodyText) + ` AND ` + kw + ` AND m.enc_key_id IS NULL
		    AND t.id < coalesce((SELECT min(walk_end.id) FROM (` + walk + `) walk_end), 0)
		  ORDER BY t.id DESC)) x LIMIT ` + n + `)`
}

// sharedKeyThreshold is the number of messages from which a search key is
// walked to rather than read through the index (see walkKey).
const sharedKeyThreshold = 1000

// walkKey finds the newest page of messages having a key that thousands
// of messages share (a tenant): walking the listing's own index newest
// first meets them within a few thousand rows, where reading them all
// through the GIN index means thousands of scattered reads and a sort. The
// planner underrates how scattered those rows are and would not walk, so
// the transaction forbids the other plans for this one query.
func walkKey(ctx context.Context, tx pgx.Tx, f Filter, sq searchQuery, opt ListOptions, limit int) ([]int64, error) {
	base := f
	base.Query = ""
	// The walk finds resting rows (searchIDs reads replaying ones apart).
	statuses, _ := f.Statuses()
	resting, _ := restingStatuses(statuses)
	if len(resting) == 0 {
		return []int64{}, nil
	}
	base.Status = strings.Join(resting, ",")
	var args sqlArgs
	where, err := base.where(&args)
	if err != nil {
		return nil, err
	}
	if opt.Before > 0 {
		where += " AND m.id < " + args.add(opt.Before)
	}
	for _, set := range []string{`SET LOCAL enable_seqscan = off`, `SET LOCAL enable_bitmapscan = off`} {
		if _, err := tx.Exec(ctx, set); err != nil {
			return nil, fmt.Errorf("store: search: %w", err)
		}
	}
	rows, err := tx.Query(ctx, `SELECT m.id FROM dead_messages m WHERE `+where+` AND `+sq.hasKeys(&args, "m", sq.key)+`
ORDER BY m.id DESC LIMIT `+args.add(limit+1), args...)
	if err != nil {
		return nil, fmt.Errorf("store: search key %q: %w", sq.key, err)
	}
	ids, err := pgx.CollectRows(rows, pgx.RowTo[int64])
	if err != nil {
		return nil, fmt.Errorf("store: search key %q: %w", sq.key, err)
	}
	for _, set := range []string{`SET LOCAL enable_seqscan = on`, `SET LOCAL enable_bitmapscan = on`} {
		if _, err := tx.Exec(ctx, set); err != nil {
			return nil, fmt.Errorf("store: search: %w", err)
		}
	}
	if ids == nil {
		ids = []int64{}
	}
	return ids, nil
}
