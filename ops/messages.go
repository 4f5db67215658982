package ops

import (
	"context"
	"fmt"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/store"
)

// ListRequest asks for one page of dead messages.
type ListRequest struct {
	// Filter selects the messages; the caller's scope is added to it.
	Filter store.Filter
	// Limit is the page size. Optional; default 50, at most 1000.
	Limit int
	// Cursor continues a listing: MessagePage.NextCursor of the page
	// before, for the same filter. Optional.
	Cursor string
	// IncludeBody returns bodies: refused for a token that may not see
	// them.
	IncludeBody bool
	// Total adds how many messages the filter selects (all pages), exact
	// or estimated (store.CountMessages).
	Total bool
	// Sort is the order (store.SortNewest, SortFailed, SortQueue): the
	// web console's sorted listings. Optional; default newest first.
	Sort string
	// BodyPrefix returns the first BodyPrefix bytes of each body, for a
	// caller that may see bodies (none for one that may not): where a
	// search matched. Optional.
	BodyPrefix int
}

// MessagePage is one page of a listing, newest first. Its JSON form is
// the answer of GET /api/v1/messages.
type MessagePage struct {
	Messages   []store.Message `json:"messages"`
	NextCursor *string         `json:"next_cursor"`
	HasMore    bool            `json:"has_more"`
	// Total is there when asked for: how many messages the filter selects
	// over every page, and whether that is exact.
	Total *store.Total `json:"total,omitempty"`
	// TextIncomplete is there (true) when q's words were looked for and
	// more messages were waiting for the text index than a search reads
	// one by one (store.TextTailMax): older matches among them show once
	// the indexer has caught up.
	TextIncomplete bool `json:"text_search_incomplete,omitempty"`
}

// ListMessages returns one page of the messages the filter selects within
// the caller's scope. A caller that may not see bodies may not search them
// either: a search would reveal what a body contains.
func (s *Service) ListMessages(ctx context.Context, c Caller, r ListRequest) (MessagePage, error) {
	p := c.Principal
	limit, err := s.checkList(ctx, c, r)
	if err != nil {
		return MessagePage{}, err
	}
	opt, key, err := listOptions(p, r, limit)
	if err != nil {
		return MessagePage{}, err
	}
	f, err := scoped(p, r.Filter)
	if err != nil {
		return MessagePage{}, err
	}
	page, err := s.st.ListMessages(ctx, f, opt)
	if err != nil {
		return MessagePage{}, err
	}
	out := s.messagePage(p, page, opt, r.Sort, key)
	if r.Total {
		if out.Total, err = s.countListed(ctx, p, f, out.TextIncomplete); err != nil {
			return MessagePage{}, err
		}
	}
	return out, nil
}

// checkList checks a listing request against the caller's rights and the
// listing's bounds, and returns its page size.
func (s *Service) checkList(ctx context.Context, c Caller, r ListRequest) (limit int, err error) {
	p := c.Principal
	if err := Authorize(p, ActListMessages); err != nil {
		return 0, err
	}
	f := r.Filter
	if err := CheckFilter(f); err != nil {
		return 0, err
	}
	if err := s.mayFilterBodies(p, f); err != nil {
		return 0, err
	}
	if err := s.checkSearch(f); err != nil {
		return 0, err
	}
	if err := s.checkRefs(ctx, c, f); err != nil {
		return 0, err
	}
	limit = r.Limit
	if limit == 0 {
		limit = store.ListLimitDefault
	}
	if limit < 1 || limit > store.ListLimitMax {
		return 0, invalid("limit: %d must be a whole number from 1 to %d", r.Limit, store.ListLimitMax)
	}
	if r.IncludeBody && !p.Bodies {
		return 0, forbidden("include_body: token %s may not see message bodies", p.Name)
	}
	if !store.ValidSort(r.Sort) {
		return 0, invalid("sort: %q must be %q (latest death first) or %q (by source queue), or empty (newest first)",
			r.Sort, store.SortFailed, store.SortQueue)
	}
	return limit, nil
}

// listOptions are the store's options for a checked listing request, with
// its cursor decoded, and key: what a cursor is bound to (the filter and
// the order), so that it serves only the listing that gave it.
func listOptions(p auth.Principal, r ListRequest, limit int) (opt store.ListOptions, key string, err error) {
	opt = store.ListOptions{Limit: limit, IncludeBody: r.IncludeBody, NoBodySearch: !p.Bodies, Sort: r.Sort}
	if r.BodyPrefix > 0 && !r.IncludeBody && p.Bodies {
		opt.IncludeBody, opt.BodyPrefix = true, r.BodyPrefix
	}
	key = canonical(r.Filter)
	if r.Sort != store.SortNewest {
		key += "\x00sort=" + r.Sort
	}
	if r.Cursor != "" {
		if r.Sort != store.SortNewest {
			opt.After, err = decodeSortCursor(r.Cursor, key)
		} else {
			opt.Before, err = decodeCursor(r.Cursor, key)
		}
		if err != nil {
			return store.ListOptions{}, "", invalid("cursor: %v", err)
		}
	}
	return opt, key, nil
}

// messagePage presents a page the store listed to the caller: its
// messages as the caller may see them, body prefixes cut, and the cursor
// of the next page.
func (s *Service) messagePage(p auth.Principal, page store.MessagePage, opt store.ListOptions, sort, key string) MessagePage {
	out := MessagePage{Messages: page.Messages, HasMore: page.HasMore, TextIncomplete: page.TextIncomplete}
	if out.Messages == nil {
		out.Messages = []store.Message{}
	}
	for i := range out.Messages {
		m := &out.Messages[i]
		s.present(p, m)
		if opt.BodyPrefix > 0 && m.Body != nil && len(*m.Body) > opt.BodyPrefix {
			b := (*m.Body)[:opt.BodyPrefix] // a sealed body is opened whole
			m.Body = &b
		}
	}
	if page.HasMore {
		next := encodeCursor(page.LastID, key)
		if sort != store.SortNewest {
			next = encodeSortCursor(page.Last, key)
		}
		out.NextCursor = &next
	}
	return out
}

// countListed counts the messages the (scoped) filter selects over every
// page, for a listing that asked for its total.
func (s *Service) countListed(ctx context.Context, p auth.Principal, f store.Filter, textIncomplete bool) (*store.Total, error) {
	total, err := s.st.CountMessages(ctx, f, store.CountOptions{
		NoBodySearch: !p.Bodies, Budget: s.cfg.CountBudget, Cap: s.cfg.CountCap,
	})
	if err != nil {
		return nil, err
	}
	// A count of a search that may miss matches (their documents
	// not written yet) is a lower bound, however it was counted.
	total.Exact = total.Exact && !textIncomplete
	return &total, nil
}

// GetMessage returns one message within the caller's scope (outside it is
// store.ErrNotFound), with its body only when the caller may see bodies.
func (s *Service) GetMessage(ctx context.Context, c Caller, id int64) (store.Message, error) {
	p := c.Principal
	if err := Authorize(p, ActGetMessage); err != nil {
		return store.Message{}, err
	}
	m, err := s.st.GetMessage(ctx, id, p.Queues)
	if err != nil {
		return store.Message{}, err
	}
	s.present(p, &m)
	e, edited, err := s.st.GetMessageEdit(ctx, id)
	if err != nil {
		return store.Message{}, err
	}
	if edited {
		m.Edited = &e
	}
	return m, nil
}

// ActionRequest selects messages for acknowledge or delete. Its JSON form
// is the body of POST /api/v1/messages/acknowledge and /delete, and the
// fields of the matching control commands.
type ActionRequest struct {
	IDs     []int64       `json:"ids"`
	Filter  *store.Filter `json:"filter"`
	Limit   int           `json:"limit"`
	DryRun  bool          `json:"dry_run"`
	Confirm bool          `json:"confirm"`
}

// Acknowledge marks the selected messages acknowledged (operator).
func (s *Service) Acknowledge(ctx context.Context, c Caller, r ActionRequest) (store.ActionResult, error) {
	return s.bulk(ctx, c, ActAcknowledge, r, s.st.Acknowledge)
}

// Delete removes the selected messages for good (admin).
func (s *Service) Delete(ctx context.Context, c Caller, r ActionRequest) (store.ActionResult, error) {
	return s.bulk(ctx, c, ActDelete, r, s.st.Delete)
}

type bulkFunc func(ctx context.Context, f store.Filter, a store.Actor, o store.ActionOptions) (store.ActionResult, error)

// bulk runs acknowledge or delete: ids or a filter within the caller's
// scope; a selection by filter above the threshold needs Confirm (store
// counts it, bounded, in the action's own transaction, so the count and
// the change agree).
func (s *Service) bulk(ctx context.Context, c Caller, a Action, r ActionRequest, do bulkFunc) (store.ActionResult, error) {
	if err := Authorize(c.Principal, a); err != nil {
		return store.ActionResult{}, err
	}
	f, err := Selection(r.IDs, r.Filter)
	if err != nil {
		return store.ActionResult{}, err
	}
	if err := s.mayFilterBodies(c.Principal, f); err != nil {
		return store.ActionResult{}, err
	}
	if err := s.checkSearch(f); err != nil {
		return store.ActionResult{}, err
	}
	if err := s.checkRefs(ctx, c, f); err != nil {
		return store.ActionResult{}, err
	}
	if r.Limit < 0 {
		return store.ActionResult{}, invalid("limit: %d must be >= 0", r.Limit)
	}
	if r.Limit > 0 && len(f.IDs) > 0 {
		return store.ActionResult{}, invalid("limit: caps a selection by filter; with ids, send only the ids to act on")
	}
	if f, err = scoped(c.Principal, f); err != nil {
		return store.ActionResult{}, err
	}
	if len(f.IDs) > 0 && f.Status == "" {
		// Ids name messages whatever their status.
		f.Status = "all"
	}
	opt := store.ActionOptions{DryRun: r.DryRun, Confirm: r.Confirm, ConfirmAbove: s.cfg.ConfirmAbove, Limit: r.Limit}
	if !r.DryRun && s.cfg.ApprovalAbove > 0 {
		dry := opt
		dry.DryRun = true
		res, err := do(ctx, f, c.actor(), dry)
		if err != nil {
			return store.ActionResult{}, err
		}
		if len(f.IDs) == 0 {
			if err := needsConfirm(res.Matched, s.cfg.ConfirmAbove, r.Confirm); err != nil {
				return store.ActionResult{}, err
			}
		}
		// What would change: ids already acknowledged match but stay as
		// they are, and the snapshot leaves them out too.
		if err := s.needsApproval(ctx, c, string(a), res.Matched-res.Unchanged, r, f, r.Limit); err != nil {
			return store.ActionResult{}, err
		}
	}
	res, err := do(ctx, f, c.actor(), opt)
	if err == nil && r.DryRun {
		// What the real action's threshold counts, as above.
		res.DryRunApproval = s.dryRunApproval(c, string(a), res.Matched-res.Unchanged)
	}
	return res, err
}

// DeleteMessage deletes one message within the caller's scope (admin).
func (s *Service) DeleteMessage(ctx context.Context, c Caller, id int64) (store.ActionResult, error) {
	p := c.Principal
	if err := Authorize(p, ActDelete); err != nil {
		return store.ActionResult{}, err
	}
	if err := s.st.DeleteMessageIn(ctx, id, p.Queues, c.actor()); err != nil {
		return store.ActionResult{}, err
	}
	return store.ActionResult{Action: store.ActionDelete, Matched: 1, Changed: 1}, nil
}

// Selection turns a request's ids or filter into one filter, checked.
func Selection(ids []int64, filter *store.Filter) (store.Filter, error) {
	switch {
	case len(ids) > 0 && filter != nil:
		return store.Filter{}, invalid("ids: give ids or filter, not both")
	case len(ids) > 0:
		f := store.Filter{IDs: ids}
		return f, CheckFilter(f)
	case filter != nil:
		return *filter, CheckFilter(*filter)
	}
	return store.Filter{}, invalid("ids: ids or filter is required")
}

// CheckFilter validates a filter and names the wrong field: text that
// PostgreSQL cannot hold (NUL, invalid UTF-8; no stored value contains it),
// then the store's own checks (the field filters' syntax among them), the
// group id's form, and that field filters are bounded.
func CheckFilter(f store.Filter) error {
	for _, field := range []struct{ name, v string }{
		{"status", f.Status}, {"source_queue", f.SourceQueue}, {"reason", f.Reason}, {"q", f.Query}, {"group", f.Group},
	} {
		if err := CheckText(field.name, field.v); err != nil {
			return err
		}
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if f.Group != "" {
		if _, err := store.ParseGroupID(f.Group); err != nil {
			return err
		}
	}
	return checkFieldBound(f)
}

// checkFieldBound refuses field filters that nothing else bounds. A field
// filter is no index condition: it parses the body of every message the
// rest of the filter selects. So the rest must select a part of the
// table: one source queue, messages since a time, one failure group, ids,
// or a search (q, which its indexes answer). A time range without its
// start (failed_before alone) still covers all history, and a token's
// scope can be every queue.
func checkFieldBound(f store.Filter) error {
	if len(f.Fields) == 0 || f.SourceQueue != "" || f.FailedAfter != nil || f.Group != "" || len(f.IDs) > 0 || f.Query != "" ||
		f.ReplayTask > 0 || f.Approval > 0 {
		return nil
	}
	return invalid("field: a field filter reads the body of every message the other filters select, " +
		"and these select every queue and all time: add source_queue, failed_after, group, ids or q")
}

// checkRefs answers a filter naming a replay task or an approval request
// the caller may not see (TaskVisible, approvalVisible) as not found, as
// GetReplay and GetApproval do: its messages are the caller's own anyway
// (the scope applies), but which of them a hidden task or request touched
// is not.
func (s *Service) checkRefs(ctx context.Context, c Caller, f store.Filter) error {
	if f.ReplayTask > 0 {
		if _, err := s.GetReplay(ctx, c, f.ReplayTask); err != nil {
			return fmt.Errorf("replay_task: %w", err)
		}
	}
	if f.Approval > 0 {
		if _, err := s.GetApproval(ctx, c, f.Approval); err != nil {
			return fmt.Errorf("approval: %w", err)
		}
	}
	return nil
}

// mayFilterBodies refuses field filters to a caller who may not see
// bodies: which messages match would tell what their bodies hold. For
// the same reason it refuses to a masked caller a field filter on a
// redacted body path (redactor.maskedField): card.number>"41112" would
// let it find a masked card number by halving, a count at a time.
func (s *Service) mayFilterBodies(p auth.Principal, f store.Filter) error {
	if len(f.Fields) == 0 {
		return nil
	}
	if !p.Bodies {
		return forbidden("field: token %s may not see message bodies, so it may not filter on them", p.Name)
	}
	if !s.red.masks(p) || len(s.red.paths) == 0 {
		return nil
	}
	for _, expr := range f.Fields {
		ff, err := store.ParseField(expr)
		if err != nil {
			return err
		}
		if path, ok := s.red.maskedField(ff.Path); ok {
			return invalid("field: %q filters on %s, a body path redacted for token %s, so it may not filter on it: "+
				"which messages match would tell the masked values", expr, path, p.Name)
		}
	}
	return nil
}

// CheckText refuses what PostgreSQL text cannot hold (NUL, invalid UTF-8).
func CheckText(name, s string) error {
	if !utf8.ValidString(s) || strings.IndexByte(s, 0) >= 0 {
		return invalid("%s: must be valid UTF-8 text without NUL", name)
	}
	return nil
}

// canonical renders the parts of a filter a cursor is bound to.
func canonical(f store.Filter) string {
	t := func(p *time.Time) string {
		if p == nil {
			return ""
		}
		return p.UTC().Format(time.RFC3339Nano)
	}
	key := strings.Join(append([]string{f.Status, f.SourceQueue, f.Reason, t(f.FailedAfter), t(f.FailedBefore), f.Query, f.Group},
		f.Fields...), "\x00")
	if f.Category != "" {
		// Only when set, so that cursors made before categories still hold.
		key += "\x00category=" + f.Category
	}
	if f.ReplayTask != 0 || f.Approval != 0 {
		// Likewise.
		key += fmt.Sprintf("\x00replay=%d/%s/%s\x00approval=%d", f.ReplayTask, f.ReplayOutcome, f.ReplayError, f.Approval)
	}
	return key
}
