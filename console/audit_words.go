package console

import (
	"strconv"

	"github.com/dlq/dlq/store"
)

// An audit row that names no selection (a decision on an approval
// request, a replay's cancel) says what it did in words, with a link to
// the request or the replay; a row that started a replay or a request
// links to it. The ids come from the row's selection and detail, as the
// store writes them. The page shows these words where it shows a
// selection's (the row's Words).

// auditIDs are the ids an audit row's selection or detail may hold, and
// a rejection's reason.
type auditIDs struct {
	ApprovalID int64  `json:"approval_id"`
	TaskID     int64  `json:"task_id"`
	Reason     string `json:"reason"`
}

// readAuditIDs reads the ids of the row's selection, then its detail's
// for those the selection lacks: a replay's cancel names its task in the
// selection, a replay its task in the detail.
func readAuditIDs(e store.AuditEntry) auditIDs {
	var sel, det auditIDs
	_ = jsonUnmarshal(e.Selection, &sel)
	_ = jsonUnmarshal(e.Detail, &det)
	if sel.ApprovalID == 0 {
		sel.ApprovalID = det.ApprovalID
	}
	if sel.TaskID == 0 {
		sel.TaskID = det.TaskID
	}
	sel.Reason = det.Reason
	return sel
}

func requestPhrase(id int64) phrase {
	return phrase{Text: "request " + strconv.FormatInt(id, 10), Href: "/ui/approvals/" + strconv.FormatInt(id, 10)}
}

func replayPhrase(id int64) phrase {
	return phrase{Text: "replay " + strconv.FormatInt(id, 10), Href: "/ui/replays/" + strconv.FormatInt(id, 10)}
}

// auditDid is what a decision or a cancel did, in words ("approved
// request 4", "cancelled replay 7"); nil for the other actions.
func auditDid(e store.AuditEntry) *selectionWords {
	ids := readAuditIDs(e)
	var p []phrase
	switch e.Action {
	case store.ActionApprove, store.ActionReject, store.ActionApprovalWithdraw:
		if ids.ApprovalID == 0 {
			return nil
		}
		verb := map[string]string{store.ActionApprove: "approved ", store.ActionReject: "rejected ", store.ActionApprovalWithdraw: "withdrew "}[e.Action]
		p = []phrase{{Text: verb}, requestPhrase(ids.ApprovalID)}
		if e.Action == store.ActionReject && ids.Reason != "" {
			p = append(p, phrase{Text: ": “" + short(ids.Reason, 300) + "”"})
		}
	case store.ActionApprovalExpire:
		if ids.ApprovalID == 0 {
			return nil
		}
		p = []phrase{requestPhrase(ids.ApprovalID), {Text: " expired"}}
	case auditActionCancel:
		if ids.TaskID == 0 {
			return nil
		}
		p = []phrase{{Text: "cancelled "}, replayPhrase(ids.TaskID)}
	default:
		return nil
	}
	return &selectionWords{Phrases: p}
}

// auditActionCancel is a replay's cancel, as the store records it.
const auditActionCancel = store.ActionReplayCancel

// auditRefs links a row that started a replay or an approval request,
// or ran on one's approval, to it ("as replay 7, approved in request
// 4"); nil when the row names neither.
func auditRefs(e store.AuditEntry) []phrase {
	ids := readAuditIDs(e)
	var p []phrase
	switch e.Action {
	case "replay", store.ActionEditReplay:
		if ids.TaskID > 0 {
			p = append(p, phrase{Text: "as "}, replayPhrase(ids.TaskID))
		}
	case store.ActionApprovalRequest:
		if ids.ApprovalID > 0 {
			return []phrase{{Text: "as "}, requestPhrase(ids.ApprovalID)}
		}
		return nil
	case store.ActionAcknowledge, store.ActionDelete:
	default:
		return nil
	}
	if ids.ApprovalID > 0 {
		if len(p) > 0 {
			p = append(p, phrase{Text: ", "})
		}
		p = append(p, phrase{Text: "approved in "}, requestPhrase(ids.ApprovalID))
	}
	return p
}

// withRefs appends refs to w, after a comma when w says something.
func withRefs(w *selectionWords, refs []phrase) *selectionWords {
	if len(refs) == 0 {
		return w
	}
	if w == nil {
		return &selectionWords{Phrases: refs}
	}
	w.Phrases = append(append(w.Phrases, phrase{Text: "; "}), refs...)
	return w
}
