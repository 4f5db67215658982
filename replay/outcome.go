package replay

import "github.com/dlq/dlq/store"

// What a finished task delivered (Task.Outcome).
const (
	// OutcomeAllPublished: every selected message the task tried to send
	// was confirmed by the broker, and it tried every one it did not skip.
	OutcomeAllPublished = "all_published"
	// OutcomePartial: some were confirmed, and some failed, have an
	// unknown outcome, or were never tried (the task was cancelled or
	// stopped first).
	OutcomePartial = "partial"
	// OutcomeNonePublished: not one message was confirmed.
	OutcomeNonePublished = "none_published"
)

// TaskOutcome is the outcome of a task with this status and these
// counters: "" while it has not finished. The rule:
//   - none_published when published is 0, whatever else happened: a task
//     whose every message was skipped delivered nothing either;
//   - all_published when published > 0 and nothing failed, nothing is
//     unknown and nothing remains: skipped messages (loop guard, not
//     pending, deleted) were never to be sent and do not count against
//     it;
//   - partial otherwise. An unknown outcome counts as not published: the
//     broker never confirmed it, though it may have been delivered.
func TaskOutcome(status string, published, failed, unknown, remaining int64) string {
	switch {
	case !store.TaskFinished(status):
		return ""
	case published == 0:
		return OutcomeNonePublished
	case failed == 0 && unknown == 0 && remaining == 0:
		return OutcomeAllPublished
	}
	return OutcomePartial
}
