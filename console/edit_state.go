package console

import "github.com/dlq/dlq/store"

// editState says in words where an edit's corrected copy is (the edit's
// state, store.Edit*): "being sent" until its task settles it, then
// "sent", "perhaps sent" (no confirm came: it may be out) or "not sent"
// with the reason.
func editState(e store.MessageEdit) string {
	switch e.State {
	case store.EditInProgress:
		return "being sent"
	case store.EditSent:
		return "sent"
	case store.EditUnknown:
		if e.Error != "" {
			return "perhaps sent (its publish was never confirmed: " + e.Error + ")"
		}
		return "perhaps sent (its publish was never confirmed)"
	case store.EditFailed:
		if e.Error != "" {
			return "not sent: " + e.Error
		}
		return "not sent"
	}
	return e.State
}

// copyState is editState as the message's page tells it: an edit whose
// task has not taken the original yet, while the original was
// acknowledged meanwhile (acknowledge, single or bulk, takes a pending
// message whatever its edit: ops.Acknowledge), will not send its copy: the
// task skips a message that is no longer pending (store's replay claim), and
// the edit then settles as "not sent".
func copyState(e store.MessageEdit, status string) string {
	if copyDropped(e, status) {
		return "will not be sent: the message was " + status + " before its task took it"
	}
	return editState(e)
}

// copyDropped reports whether an edit still in progress will not send its
// copy: the original left the pending set (acknowledged) before the task
// claimed it (a claimed one is replaying).
func copyDropped(e store.MessageEdit, status string) bool {
	return e.State == store.EditInProgress && status != store.StatusPending && status != store.StatusReplaying
}

// Moving says, in words, what the message is on its way to ("" when
// nothing): its corrected copy is being sent, or a replay has it claimed.
// The page then refreshes itself (auto-refresh on) and so follows it: the
// copy goes out moments after the send's redirect showed the message
// still pending.
func (d messageData) Moving() string {
	switch {
	case d.M.Edited != nil && copyDropped(*d.M.Edited, d.M.Status):
		return "its corrected copy will not be sent (its task skips a message no longer pending)"
	case d.M.Edited != nil && d.M.Edited.State == store.EditInProgress:
		return "its corrected copy is being sent"
	case d.M.Status == store.StatusReplaying:
		return "a replay is sending it"
	}
	return ""
}
