package ops

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Who may decide a request, in one place: the approvals page's buttons,
// the navigation's count, the confirmation's "who can approve it", the
// refusal of a request nobody could approve, and Approve and Reject
// themselves all follow MayDecide.

// MayDecide reports whether p may approve or reject a: it sees the
// request (every queue of the request's scope is among its own), its role
// allows deciding and the action the request carries out (a delete needs
// an admin), it is not the requester, and the request is still pending.
func MayDecide(p auth.Principal, a store.Approval) bool {
	return a.Status == store.ApprovalPending && mayDecide(p, a)
}

func mayDecide(p auth.Principal, a store.Approval) bool {
	return a.RequestedBy != p.Name && Authorize(p, ActDecideApproval) == nil &&
		Authorize(p, actionOfApproval(a)) == nil && approvalVisible(p, a)
}

// MayWithdraw reports whether p may withdraw a: its own request, still
// pending.
func MayWithdraw(p auth.Principal, a store.Approval) bool {
	return a.Status == store.ApprovalPending && a.RequestedBy == p.Name && Authorize(p, ActWithdrawApproval) == nil
}

// approversOf names the configured principals who may decide a, sorted;
// nil when the layer does not know the configuration (Config.Principals).
func (s *Service) approversOf(a store.Approval) []string {
	if s.cfg.Principals == nil {
		return nil
	}
	out := []string{}
	for _, p := range s.cfg.Principals() {
		if mayDecide(p, a) {
			out = append(out, p.Name)
		}
	}
	slices.Sort(out)
	return out
}

// approvable refuses a request that no configured principal but its
// requester could decide: it would wait for nobody and expire. scope is
// the request's (the requester's queues). It says what approving needs and
// what to do instead.
func (s *Service) approvable(p auth.Principal, action string, count int64, scope []string) error {
	a := store.Approval{Action: action, RequestedBy: p.Name, Scope: scope, Status: store.ApprovalPending}
	if names := s.approversOf(a); names == nil || len(names) > 0 {
		return nil
	}
	return &Error{Kind: ErrNoApprover, Msg: fmt.Sprintf("this %s of %d messages needs a second person's approval (it selects more than approval_above, %d), "+
		"and no configured token but %s may approve it: approving it needs %s. Select at most %d messages at a time, "+
		"or have an administrator configure a second token that may approve (api.tokens; docs/REPLAY.md, \"Approval\")",
		action, count, s.cfg.ApprovalAbove, p.Name, approverNeeds(a), s.cfg.ApprovalAbove)}
}

// approverNeeds says in words what a principal needs to decide a.
func approverNeeds(a store.Approval) string {
	role := RoleFor(actionOfApproval(a))
	if r := RoleFor(ActDecideApproval); !(auth.Principal{Role: role}).Can(r) {
		role = r
	}
	queues := "every queue"
	if a.Scope != nil {
		queues = "the queues " + strings.Join(a.Scope, ", ")
	}
	return fmt.Sprintf("role %s or higher, with %s, and not to be its requester", role, queues)
}

// ApprovalNotice says, before an action is asked for, whether it will wait
// for approval and who can give it: the confirmation page's words.
type ApprovalNotice struct {
	// Needed: the action selects more than Above messages.
	Needed bool
	Above  int64
	// Approvers names the configured tokens that may approve it (nil: not
	// known on this instance); empty when needed means the request will be
	// refused, and Needs says what an approver must have.
	Approvers []string
	Needs     string
}

// NoticeApproval tells the caller whether its action (replay, acknowledge
// or delete) of count messages will need approval, and who may give it.
func (s *Service) NoticeApproval(c Caller, action string, count int64) ApprovalNotice {
	n := ApprovalNotice{Above: s.cfg.ApprovalAbove}
	if s.cfg.ApprovalAbove <= 0 || count <= s.cfg.ApprovalAbove {
		return n
	}
	a := store.Approval{Action: action, RequestedBy: c.Principal.Name, Scope: c.Principal.Queues, Status: store.ApprovalPending}
	n.Needed, n.Approvers, n.Needs = true, s.approversOf(a), approverNeeds(a)
	return n
}

// ApprovalView is a request as one caller sees it: what its selection
// is, in words, and what the caller may do with it.
type ApprovalView struct {
	store.Approval
	// Selection is what the requester asked for: ids, or a filter (with
	// its failure group, when it names one the caller sees), and a limit.
	Selection SelectionView
	// Replay is a replay request's options as asked (its target, rate,
	// delay or start time, canary, on_unknown, force): what the approver
	// lets publish where and how fast. nil for an acknowledge or delete.
	Replay *replay.Request
	// Sample holds a few of the selected messages (the snapshot, while the
	// request waits), as the caller may see them.
	Sample []store.Message
	// Now is what approving the request would act on now, counted when
	// the view is made (a pending request only; nil otherwise, when it
	// cannot be counted here, when the caller's scope does not cover the
	// request's, when counting failed (logged), or in a list past
	// approvalNowListBudget);
	// Stale says why each message of Sample that
	// it would leave as it is no longer qualifies.
	Now   *ApprovalNow
	Stale map[int64]string
	// NowUnknown says Now is nil for another reason than the list's
	// budget: no page of this instance would count it for this caller.
	NowUnknown bool
	// MayDecide and MayWithdraw say which controls the caller gets.
	MayDecide, MayWithdraw bool
	// Approvers names the configured tokens that may decide it (nil: not
	// known on this instance).
	Approvers []string
}

// SelectionView is a selection as asked: ids or a filter, and a limit.
type SelectionView struct {
	IDs    []int64
	Filter *store.Filter
	Limit  int
	// Group is the filter's failure group, when it names one the caller
	// sees (nil otherwise): its title names it, not its id.
	Group *store.Group
}

// approvalSampleSize is how many selected messages a view shows.
const approvalSampleSize = 5

// approvalNowListBudget bounds how many snapshot messages one list of
// requests counts again (ApprovalView.Now): the list refreshes itself every
// few seconds, and counting a snapshot of a million takes about a second.
// A request past what is left of it is counted on its own page only.
const approvalNowListBudget = 20_000

// ApprovalViews returns the newest limit requests the caller may see
// (as ListApprovals), each with its selection in words, a sample of its
// snapshot while it waits, and what the caller may do with it.
func (s *Service) ApprovalViews(ctx context.Context, c Caller, limit int) ([]ApprovalView, error) {
	list, err := s.ListApprovals(ctx, c, limit)
	if err != nil {
		return nil, err
	}
	groups := map[string]*store.Group{}
	out := make([]ApprovalView, 0, len(list))
	budget := int64(approvalNowListBudget)
	for _, a := range list {
		// Only what will be counted spends the budget: a request the
		// caller's scope does not cover is not counted for it at all.
		countNow := a.Status == store.ApprovalPending && a.Count <= budget && coversScope(c.Principal, a)
		if countNow {
			budget -= a.Count
		}
		v, err := s.approvalView(ctx, c, a, groups, countNow)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	return out, nil
}

// ApprovalViewOf is one request the caller may see, as ApprovalViews
// shows it, what approving would act on counted again. refresh says the
// page is refreshing itself (every few seconds): then a request past
// approvalNowListBudget is not counted again, as in the list, since a
// snapshot of a million takes about a second each time; loading the page
// counts it.
func (s *Service) ApprovalViewOf(ctx context.Context, c Caller, id int64, refresh bool) (ApprovalView, error) {
	a, err := s.GetApproval(ctx, c, id)
	if err != nil {
		return ApprovalView{}, err
	}
	return s.approvalView(ctx, c, a, map[string]*store.Group{}, !refresh || a.Count <= approvalNowListBudget)
}

// ApproversOf names the configured tokens that may decide a, sorted (nil
// when the configuration is not known here).
func (s *Service) ApproversOf(a store.Approval) []string { return s.approversOf(a) }

// approvalView describes a for the caller; groups caches the failure
// groups already looked up.
func (s *Service) approvalView(ctx context.Context, c Caller, a store.Approval, groups map[string]*store.Group, countNow bool) (ApprovalView, error) {
	v := ApprovalView{Approval: a, MayDecide: MayDecide(c.Principal, a), MayWithdraw: MayWithdraw(c.Principal, a)}
	var sel struct {
		IDs    []int64       `json:"ids"`
		Filter *store.Filter `json:"filter"`
		Limit  int           `json:"limit"`
	}
	if err := json.Unmarshal(a.Request, &sel); err != nil {
		return ApprovalView{}, fmt.Errorf("ops: read the request of approval %d: %w", a.ID, err)
	}
	v.Selection = SelectionView{IDs: sel.IDs, Filter: sel.Filter, Limit: sel.Limit}
	if a.Action != store.ActionAcknowledge && a.Action != store.ActionDelete {
		var r ReplayRequest
		if err := json.Unmarshal(a.Request, &r); err != nil {
			// The rest of the view stands (its selection read); the page
			// says nothing of the options, and approving it would be
			// refused with the reason.
			s.log.Warn("cannot read a replay request's options", "approval_id", a.ID, "error", err, "request_id", c.RequestID)
		} else {
			v.Replay = &r.Request
		}
	}
	if g := sel.Filter; g != nil && g.Group != "" {
		if _, ok := groups[g.Group]; !ok {
			groups[g.Group] = s.groupOrNil(ctx, c, g.Group)
		}
		v.Selection.Group = groups[g.Group]
	}
	if a.Status != store.ApprovalPending {
		return v, nil
	}
	v.Approvers = s.approversOf(a)
	page, err := s.st.ListMessages(ctx, store.Filter{Approval: a.ID, Status: "all", Scope: c.Principal.Queues},
		store.ListOptions{Limit: approvalSampleSize})
	if err != nil {
		return ApprovalView{}, err
	}
	for i := range page.Messages {
		s.present(c.Principal, &page.Messages[i])
	}
	v.Sample, v.Stale = page.Messages, staleSample(a, page.Messages)
	// The count runs in the requester's scope, as approving would: a
	// caller whose scope does not cover it would learn of queues it does
	// not see (its own request, made by its name with a wider token).
	if !coversScope(c.Principal, a) {
		v.NowUnknown = true
		return v, nil
	}
	if !countNow {
		return v, nil
	}
	if v.Now, err = s.approvalNow(ctx, a); err != nil {
		// The rest of the view stands; the page says nothing of now.
		s.log.Warn("cannot count what approving a request would act on now", "approval_id", a.ID,
			"action", a.Action, "error", err, "request_id", c.RequestID)
		v.Now = nil
	}
	v.NowUnknown = v.Now == nil
	return v, nil
}

// groupOrNil is the failure group id as the caller sees it, nil when it
// does not see it or it has no message left.
func (s *Service) groupOrNil(ctx context.Context, c Caller, id string) *store.Group {
	g, err := s.Group(ctx, c, id)
	if err != nil {
		return nil
	}
	return &g
}

// PendingForMe counts the requests waiting for a decision that the
// caller may decide: the console navigation's count.
func (s *Service) PendingForMe(ctx context.Context, c Caller) (int, error) {
	if Authorize(c.Principal, ActDecideApproval) != nil {
		return 0, nil
	}
	list, err := s.st.ListPendingApprovals(ctx, pendingCountMax)
	if err != nil {
		return 0, err
	}
	n := 0
	for _, a := range list {
		if MayDecide(c.Principal, a) {
			n++
		}
	}
	return n, nil
}

// pendingCountMax bounds the requests PendingForMe reads: requests wait
// at most a day, and a console shows "1000" as well as more.
const pendingCountMax = 1000

// groupApprovalsMax bounds the waiting requests a group's page names: more
// than a few for one group is already the news.
const groupApprovalsMax = 20

// GroupApproval is a request waiting for a decision that a failure
// group's page names.
type GroupApproval struct {
	store.Approval
	// ByQueue is the queue the request selects by when it names no group
	// (its messages may include the group's, unless its other criteria
	// leave them out); "" when it selects the group itself.
	ByQueue string
}

// PendingGroupApprovals returns the requests waiting for a decision whose
// selection is failure group g's filter, or a filter by g's queue that
// names no group, and that the caller may see (as ListApprovals), newest
// first: a group's page names them, so a second engineer does not ask for
// the same again. None for a caller that may not list requests. It does
// not count the group's messages in each request: the page stays cheap.
func (s *Service) PendingGroupApprovals(ctx context.Context, c Caller, g store.Group) ([]GroupApproval, error) {
	if Authorize(c.Principal, ActListApprovals) != nil {
		return nil, nil
	}
	list, err := s.st.ListPendingApprovalsOfGroup(ctx, g.ID, g.SourceQueue, groupApprovalsMax)
	if err != nil {
		return nil, err
	}
	out := []GroupApproval{}
	for _, a := range list {
		if !approvalVisible(c.Principal, a) {
			continue
		}
		var req struct {
			Filter *store.Filter `json:"filter"`
		}
		ga := GroupApproval{Approval: a}
		if json.Unmarshal(a.Request, &req) == nil && req.Filter != nil && req.Filter.Group == "" {
			ga.ByQueue = req.Filter.SourceQueue
		}
		out = append(out, ga)
	}
	return out, nil
}
