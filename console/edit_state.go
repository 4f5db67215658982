package console

import (
	"strconv"
	"time"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// editUntakenAfter is how long an edit's task may wait for a runner
// before the message's page says that none took it. Runners poll every
// replay.poll_interval (1 s by default) and take a task at once when one
// is free, so half a minute untaken means no instance runs it: none is up
// and connected to RabbitMQ, or only runners of an earlier version are
// (they leave edit tasks alone, migration 00081), or every runner is busy
// with max_tasks long tasks (a runner takes none then: replay's run loop).
const editUntakenAfter = 30 * time.Second

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
		if w := untaken(d.EditTask, time.Now()); w > 0 {
			// Still followed: the copy goes out as soon as a runner
			// comes (an upgrade's new instances), but the page says why
			// nothing moves instead of "being sent" for ever.
			return "its corrected copy waits: no dlq instance has taken its task, replay " +
				strconv.FormatInt(d.EditTask.ID, 10) + ", in the " + fmtDuration(w) +
				" since it could start (check that a dlq serve of this version is up, connected to RabbitMQ and not busy with " +
				"replay.max_tasks other replays; " +
				"during an upgrade earlier versions leave edit tasks alone, docs/UPGRADING.md \"The rule\")"
		}
		return "its corrected copy is being sent"
	case d.M.Status == store.StatusReplaying:
		return "a replay is sending it"
	}
	return ""
}

// editTask is the task of m's edit among its replays, nil when it is not
// among them (not visible, or past the newest MessageReplaysMax).
func editTask(m store.Message, replays []ops.MessageReplay) *replay.Task {
	if m.Edited == nil {
		return nil
	}
	for i := range replays {
		if replays[i].Task.ID == m.Edited.TaskID {
			return &replays[i].Task
		}
	}
	return nil
}

// untaken is how long task t has waited for a runner past the moment it
// could start, once that is longer than editUntakenAfter (0 otherwise, and
// for a task a runner took: running, or finished).
func untaken(t *replay.Task, now time.Time) time.Duration {
	if t == nil || t.Status != replay.StatusScheduled {
		return 0
	}
	from := t.CreatedAt
	if t.StartAt.After(from) {
		from = t.StartAt
	}
	w := now.Sub(from)
	if w < editUntakenAfter {
		return 0
	}
	return w
}
