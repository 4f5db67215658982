package ops

import (
	"fmt"
	"strings"
	"time"

	"github.com/dlq/dlq/store"
)

// dryRunApproval is what a dry run of action (replay, acknowledge or
// delete) answers of approval, count being what the real action's
// threshold counts (a replay's remaining messages; the messages an
// acknowledge or delete would change). It follows NoticeApproval, the
// rule the console's confirmation shows, so the dry run, the confirmation
// and the real request (needsApproval, approvable) agree.
func (s *Service) dryRunApproval(c Caller, action string, count int64) store.DryRunApproval {
	n := s.NoticeApproval(c, action, count)
	needed := n.Needed
	return store.DryRunApproval{ApprovalRequired: &needed, Approvers: n.Approvers,
		ApprovalNote: n.words(c.Principal.Name, action, count, s.approvalTTL())}
}

// words says n in plain words for the person who dry-ran action of count
// messages as requester: whether the real action waits for approval and
// why, who may approve it and for how long it waits, or that it would be
// refused and what to do instead (the refusal's own advice, approvable).
func (n ApprovalNotice) words(requester, action string, count int64, ttl time.Duration) string {
	switch {
	case n.Above <= 0:
		return "not needed: four-eyes approval is off on this instance (api.approval_above is 0)"
	case !n.Needed:
		return fmt.Sprintf("not needed: the %s of %d messages is within api.approval_above (%d)", action, count, n.Above)
	}
	why := fmt.Sprintf("needed: the %s of %d messages selects more than api.approval_above (%d)", action, count, n.Above)
	switch {
	case n.Approvers == nil:
		return fmt.Sprintf("%s, so it will wait for a second token's approval (approving it needs %s) for up to %s, then expire unless approved",
			why, n.Needs, roughly(ttl))
	case len(n.Approvers) == 0:
		return fmt.Sprintf("%s, and no configured token but %s may approve it (approving it needs %s): the real request would be refused (forbidden). "+
			"Select at most %d messages at a time, or have an administrator configure a second token that may approve (api.tokens)",
			why, requester, n.Needs, n.Above)
	}
	return fmt.Sprintf("%s, so it will not run at once: it waits for %s to approve it (dlq approve), for up to %s, then expires unless approved",
		why, strings.Join(n.Approvers, " or "), roughly(ttl))
}

// roughly is d as a person reads it: "24h", "90m", not "24h0m0s".
func roughly(d time.Duration) string {
	switch {
	case d%time.Hour == 0:
		return fmt.Sprintf("%dh", d/time.Hour)
	case d%time.Minute == 0:
		return fmt.Sprintf("%dm", d/time.Minute)
	}
	return d.String()
}
