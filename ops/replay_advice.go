package ops

import "strings"

// What to do about a replay that could not publish, by why: the
// confirmation, the approval and task pages and a failed task's reasons
// say it in the same words.
const (
	adviceNoExchange = "Check the target's name, or declare the exchange first."
	adviceNoQueue    = "Check the routing key, declare the queue first, or give the exchange to publish to."
	adviceNoRoute    = "The default exchange delivers only to the queue its routing key names, and there is none of that name: " +
		"check the routing key, declare the queue first, or give the exchange to publish to."
	adviceUnroutable = "No queue is bound to the exchange for this routing key: check the routing key, or bind a queue first."
	adviceNacked     = "The broker refused it: check the target queue's limits (a full queue that rejects publishes) and the broker's log, then replay the failed again."
	adviceUnknown    = "It may have been delivered: check the consumer before replaying it again (a consumer drops a second copy by its x-dlq-id and x-dlq-replay-count)."
	adviceNotSent    = "dlq could not reach the broker: replay the failed again once it can."
	adviceRefused    = "The broker closed the channel: check the target's permissions and the broker's log."
)

// ReplayErrorAdvice says what to do about a reason a replay task recorded
// for messages it could not publish (store.ReplayErrorCount.Error, the
// broker's and the task's words), "" when it has no advice for it.
func ReplayErrorAdvice(reason string) string {
	switch {
	case strings.HasPrefix(reason, `exchange "`) && strings.Contains(reason, " does not exist"):
		return adviceNoExchange
	case strings.HasPrefix(reason, `unroutable: exchange "" `):
		return adviceNoRoute
	case strings.HasPrefix(reason, "unroutable:"):
		return adviceUnroutable
	case strings.Contains(reason, "basic.nack"):
		return adviceNacked
	case strings.HasPrefix(reason, "outcome unknown"):
		return adviceUnknown
	case strings.HasPrefix(reason, "not sent:"):
		return adviceNotSent
	case strings.HasPrefix(reason, "refused:"):
		return adviceRefused
	}
	return ""
}
