package replay

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/dlq/dlq/store"
)

// What a task does with a publish whose outcome is unknown (Request.
// OnUnknown, Config.OnUnknown).
const (
	// OnUnknownRetry sends the message again, with the same x-dlq-id and
	// x-dlq-replay-count and a new x-dlq-replay-id, once the connection is
	// back, up to Config.UnknownRetries times. The default: RabbitMQ's own
	// contract is at least once, and every copy carries the pair a
	// consumer drops a duplicate by.
	OnUnknownRetry = "retry"
	// OnUnknownHold settles the message as unknown at once: back to
	// pending, never sent again by the task. At most one copy arrives, and
	// some may not arrive at all.
	OnUnknownHold = "hold"
)

// UnknownRetriesDefault is how often, by default, a task sends a message
// again whose publish had an unknown outcome. Each of those outcomes is a
// fault that struck while the message awaited its confirm: a connection or
// node lost, a confirm timeout, the replaying process killed. A message is
// in flight for milliseconds, so one fault rarely catches it twice; a
// rolling restart of a three-node cluster drops dlq's connection at most
// three times, and three sends after the first see a message through even
// one caught at every node's restart. The bound is what keeps a message
// whose own publish is what fails (a refusal that closes the channel
// without naming the exchange) from going on for ever, and it bounds the
// copies of one message that can arrive: 1 + UnknownRetries.
const UnknownRetriesDefault = 3

// retryDelay is how long after an unknown outcome a message is sent again,
// doubled for each one it had: 1 s, 2 s, 4 s. The fault that ended it (a
// node lost, a quorum queue electing a new leader, a connection coming
// back) takes seconds to pass; a message sent again at once could spend its
// retries within it.
const retryDelay = time.Second

// MaxUnknownRetries bounds Config.UnknownRetries: eleven copies of one
// message are already more than a consumer should have to drop.
const MaxUnknownRetries = 10

// checkOnUnknown refuses a value of on_unknown other than the two.
func checkOnUnknown(field, v string) error {
	switch v {
	case "", OnUnknownRetry, OnUnknownHold:
		return nil
	}
	return fmt.Errorf("%s %q must be %q (send a message whose outcome is unknown again, the default) or %q (never: at most one copy)",
		field, v, OnUnknownRetry, OnUnknownHold)
}

// unknownRetries is the bound a task with on_unknown v records ("" takes
// the configured default).
func (s *Service) unknownRetries(v string) int {
	if v == "" {
		v = s.cfg.OnUnknown
	}
	if v == OnUnknownHold {
		return 0
	}
	return s.cfg.UnknownRetries
}

// unknownOutcome is what becomes of a publish with an unknown outcome: sent
// again while the task has retries left for the message and is not being
// cancelled, settled as unknown otherwise. A message published again is
// the same replay attempt, so it keeps x-dlq-id and x-dlq-replay-count (the
// row's replay_count did not move), and does not count against the loop
// guard; an edited copy keeps its x-dlq-replay-id, by which its original
// names it.
func (r *taskRun) unknownOutcome(attempt int, reason string) (result, why string) {
	if r.sendAgain(attempt) {
		return store.OutcomeRetry, reason
	}
	if attempt > 0 {
		reason = fmt.Sprintf("%s (sent %d times by replay task %d)", reason, attempt+1, r.task.ID)
	}
	return store.OutcomeUnknown, reason
}

// sendAgain reports whether the task sends a message again whose publish
// ended without its confirm, after attempt such outcomes before it: while
// it has retries left for it, and is not being cancelled.
func (r *taskRun) sendAgain(attempt int) bool {
	return attempt < r.task.UnknownRetries && !errors.Is(context.Cause(r.ctx), errCancelled)
}

// settleStoppedRetries settles, once a task stopped without completing
// (cancelled, canary failed), the messages that waited to be sent again:
// they are unknown now, and the task's counters say so.
func (s *Service) settleStoppedRetries(ctx context.Context, taskID int64) {
	ctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	n, err := s.st.SettleStoppedRetries(ctx, taskID)
	switch {
	case err != nil:
		s.log.Warn("cannot settle the messages the stopped task was to send again; they stay counted as remaining",
			"task_id", taskID, "error", err)
	case n > 0:
		s.metrics.replays.WithLabelValues(resultUnknown).Add(float64(n))
		s.log.Info("the stopped task will not send these messages again; settled as unknown", "task_id", taskID, "messages", n)
	}
}
