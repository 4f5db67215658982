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

// moving says, in words, what the message is on its way to ("" when
// nothing), and whether its page follows it (refreshes itself): its
// corrected copy is being sent, or a replay has it claimed. The copy goes
// out moments after the send's redirect showed the message still pending.
func (d messageData) moving(now time.Time) (words string, follow bool) {
	switch {
	case d.M.Edited != nil && copyDropped(*d.M.Edited, d.M.Status):
		const dropped = "its corrected copy will not be sent (its task skips a message no longer pending)"
		if w := untaken(d.EditTask, now); w > 0 {
			// Not followed: what became of the copy is known, and the
			// only change left, the task recording it "not sent", waits
			// for a runner that has not come; followed, the page would
			// poll for ever with nothing to show.
			return dropped + "; " + untakenWords(d.EditTask, w), false
		}
		// Followed until the task, taken moments from now, records it.
		return dropped, true
	case d.M.Edited != nil && d.M.Edited.State == store.EditInProgress:
		if w := untaken(d.EditTask, now); w > 0 {
			// Still followed: the copy goes out as soon as a runner
			// comes (an upgrade's new instances), but the page says why
			// nothing moves instead of "being sent" for ever.
			return "its corrected copy waits: " + untakenWords(d.EditTask, w), true
		}
		return "its corrected copy is being sent", true
	case d.M.Status == store.StatusReplaying:
		return "a replay is sending it", true
	}
	return "", false
}

// untakenWords say that no runner took task t in the w since it could
// start, and what to check.
func untakenWords(t *replay.Task, w time.Duration) string {
	return "no dlq instance has taken its task, replay " + strconv.FormatInt(t.ID, 10) + ", in the " + fmtDuration(w) +
		" since it could start (check that a dlq serve of this version is up, connected to RabbitMQ and not busy with " +
		"replay.max_tasks other replays; " +
		"during an upgrade earlier versions leave edit tasks alone, docs/UPGRADING.md \"The rule\")"
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
