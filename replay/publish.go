package replay

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
	amqp "github.com/rabbitmq/amqp091-go"
)

// selection is what a publishing phase claims: up to limit messages
// (limit < 0: until every item of the task is settled), or, with
// retries, only the items that wait to be sent again after an unknown
// outcome or a nack, until none does.
type selection struct {
	limit   int64
	retries bool
}

// publishPhase claims and publishes until limit messages were claimed
// (limit < 0: until every item of the task is settled), and returns once
// all it claimed is settled. It returns how many it claimed.
func (r *taskRun) publishPhase(ctx context.Context, limit int64) (int64, error) {
	return r.publishItems(ctx, selection{limit: limit})
}

// sendWaitingAgain publishes again the items that wait to be sent again,
// until none does: each ends published, failed, or unknown once the task
// sent it again as often as it may.
func (r *taskRun) sendWaitingAgain(ctx context.Context) error {
	_, err := r.publishItems(ctx, selection{limit: -1, retries: true})
	return err
}

// publishItems claims and publishes what sel selects, and returns once
// all it claimed is settled. It returns how many it claimed.
func (r *taskRun) publishItems(ctx context.Context, sel selection) (int64, error) {
	batches := make(chan *claimBatch)
	var claimed int64
	feedErr := make(chan error, 1)
	go func() {
		defer close(batches)
		var err error
		claimed, err = r.feed(ctx, sel, batches)
		feedErr <- err
	}()
	// The next batch is taken, and its second stretch marked, while the
	// current one ends: otherwise every batch would start by waiting for
	// a mark, since the claim marks only its first markFirst messages.
	var (
		next      *claimBatch
		nextAhead *markAhead
		open      = true
	)
	takeNext := func() {
		if next != nil || !open {
			return
		}
		select {
		case nb, ok := <-batches:
			if !ok {
				open = false
				return
			}
			next, nextAhead = nb, newMarkAhead(r, nb)
			nextAhead.prefetch()
		default: // not claimed yet
		}
	}
	for {
		b, ahead := next, nextAhead
		next, nextAhead = nil, nil
		if b == nil {
			if !open {
				break
			}
			var ok bool
			if b, ok = <-batches; !ok {
				break
			}
			ahead = newMarkAhead(r, b)
		}
		r.publishBatch(ctx, b, ahead, takeNext)
	}
	err := <-feedErr
	if err != nil {
		return claimed, err
	}
	return claimed, r.waitSettled(ctx)
}

// publishBatch publishes a claimed batch, one message at a time, checking
// before each publish that the run may go on (cancel reaches here within
// one publish), that the rate allows it and that the claim is still
// trusted. What it does not publish it hands back. nearEnd is called once,
// when markStep/2 messages are left to publish.
func (r *taskRun) publishBatch(ctx context.Context, b *claimBatch, ahead *markAhead, nearEnd func()) {
	defer ahead.wait()
	for i := range b.msgs {
		if len(b.msgs)-i == markStep/2 || (i == 0 && len(b.msgs) < markStep/2) {
			nearEnd()
		}
		m := &b.msgs[i]
		if ctx.Err() != nil {
			r.release(b, b.msgs[i:])
			return
		}
		if err := ahead.ensure(ctx, i); err != nil {
			r.log.Warn("cannot record what is about to be published; handing the rest of the batch back", "error", err)
			r.release(b, b.msgs[i:])
			return
		}
		if r.limiter != nil {
			if err := r.limiter.Wait(ctx); err != nil {
				r.release(b, b.msgs[i:])
				return
			}
		}
		if !r.stillHeld(ctx, b) {
			r.log.Warn("claim lost (its lease ran out before it was renewed); handing the rest of the batch back", "messages", len(b.msgs)-i)
			r.release(b, b.msgs[i:])
			return
		}
		exchange, key := target(r.task, *m)
		if ok, why := r.exchangeOK(ctx, exchange); !ok {
			r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeFailed, Error: why, Attempt: m.Unknowns, NotSent: true}, resultFailed)
			continue
		}
		rid, msg, err := r.publishing(m)
		if err != nil {
			r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeFailed, Error: err.Error(), Attempt: m.Unknowns, NotSent: true}, resultFailed)
			continue
		}
		if err := r.waitBacklog(ctx); err != nil {
			r.release(b, b.msgs[i:])
			return
		}
		sent := sentMessage{id: m.ID, replayID: rid, attempt: m.Unknowns, copyReplayCount: m.ReplayCount + 1}
		if err := r.send(ctx, b, exchange, key, msg, sent); err != nil {
			if errors.Is(err, errHandBack) {
				r.release(b, b.msgs[i:])
				return
			}
			r.record(b, store.ReplayOutcome{ID: m.ID, Token: b.token, Result: store.OutcomeFailed, Error: err.Error(), Attempt: m.Unknowns, NotSent: true}, resultFailed)
			continue
		}
		r.s.metrics.inFlight.Inc()
		// The body is no longer needed here; let it go.
		m.Body, m.Headers, m.Properties = nil, nil, nil
	}
}

// errHandBack says that a message was not sent and the rest of its batch
// goes back to the task: the run is stopping, or its claim was lost.
var errHandBack = errors.New("not sent: handed back to the task")

// channelWaitMax bounds the wait between attempts to open a channel, and
// channelWaitLog how often a wait that goes on is logged again.
const (
	channelWaitMax = 5 * time.Second
	channelWaitLog = time.Minute
)

// send publishes msg. While the publisher cannot open a channel (the
// connection's channel_max is reached, or the connection dropped as the
// channel opened) the message has not left: it is not failed, nor is its
// outcome unknown, and the bound on sending again is not spent on it. It
// is tried again, with a backoff, for as long as the claim is held (the
// heartbeat renews it; a cancel or a shutdown ends the wait), so the task
// waits for the channel rather than finishing. Any other error is the
// message's own (it was not sent either): the caller records it failed.
func (r *taskRun) send(ctx context.Context, b *claimBatch, exchange, key string, msg amqp.Publishing, sent sentMessage) error {
	wait := 100 * time.Millisecond
	var since, logged time.Time
	for {
		err := r.pub.Publish(ctx, exchange, key, msg, func(res broker.Result) { r.onResult(b, sent, res) })
		switch {
		case err == nil:
			if !since.IsZero() {
				r.log.Info("a channel opened again; publishing", "waited", time.Since(since).Round(time.Millisecond))
			}
			return nil
		case ctx.Err() != nil:
			return errHandBack
		case errors.Is(err, broker.ErrClosed):
			// The Conn is closed for good: nothing this run holds can be
			// sent any more. End the run, which hands the task back to be
			// resumed (on a Conn that is open), rather than claim the batch
			// again at once or wait on a Conn that never reopens with the
			// claims renewed, the task running for ever.
			r.stop(errConnClosed)
			return errHandBack
		case !errors.Is(err, broker.ErrNoChannel):
			return err
		}
		if now := time.Now(); now.Sub(logged) >= channelWaitLog {
			if since.IsZero() {
				since = now
			}
			logged = now
			r.log.Warn("cannot open a channel to publish on; the message was not sent, and is tried again (not failed)",
				"message_id", sent.id, "error", err, "waiting", now.Sub(since).Round(time.Second))
		}
		if sleep(ctx, wait) != nil {
			return errHandBack
		}
		wait = min(wait*2, channelWaitMax)
		if !r.stillHeld(ctx, b) {
			r.log.Warn("claim lost while waiting for a channel; handing the rest of the batch back")
			return errHandBack
		}
	}
}

// ErrNoBroker means the service has no broker connection (Config.Conn):
// it cannot look at the broker.
var ErrNoBroker = errors.New("replay: no broker connection on this instance")

// exchangeCheckTimeout bounds a look at an exchange for a caller that
// waits on it (a confirmation page): a broker that is unreachable or does
// not answer makes the answer unknown, not slow.
const exchangeCheckTimeout = 3 * time.Second

// ExchangeExists reports whether a target exchange exists on the broker,
// as a task looks before publishing to it (a passive declare on a channel
// of its own): a replay to a missing exchange publishes nothing. The
// default exchange ("") always exists. ErrNoBroker without a connection,
// broker.ErrBlocked while RabbitMQ blocks it; otherwise it returns within
// exchangeCheckTimeout, the answer unknown (an error) when the broker did
// not give one by then.
func (s *Service) ExchangeExists(ctx context.Context, name string) (bool, error) {
	if s.cfg.Conn == nil {
		return false, ErrNoBroker
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeCheckTimeout)
	defer cancel()
	return broker.ExchangeExistsNow(ctx, s.cfg.Conn, name)
}

// QueueExists reports whether a queue exists on the broker (a passive
// declare on a channel of its own), within exchangeCheckTimeout as
// ExchangeExists: a replay through the default exchange reaches only the
// queue its routing key names, and fails unroutable when there is none.
func (s *Service) QueueExists(ctx context.Context, name string) (bool, error) {
	if s.cfg.Conn == nil {
		return false, ErrNoBroker
	}
	ctx, cancel := context.WithTimeout(ctx, exchangeCheckTimeout)
	defer cancel()
	return broker.QueueExistsNow(ctx, s.cfg.Conn, name)
}

type exchangeCheck struct {
	exists bool
	at     time.Time
}

// exchangeOK looks up a target exchange before publishing to it: a
// publish to a missing exchange closes the channel, which would end every
// other publish in flight on it as unknown.
func (r *taskRun) exchangeOK(ctx context.Context, name string) (bool, string) {
	if name == "" {
		return true, ""
	}
	now := time.Now()
	if c, ok := r.exchanges[name]; ok {
		if c.exists && now.Sub(c.at) < 30*time.Second {
			return true, ""
		}
		if !c.exists && now.Sub(c.at) < time.Second {
			return false, fmt.Sprintf("exchange %q does not exist", name)
		}
	}
	exists, err := broker.ExchangeExists(ctx, r.s.cfg.Conn, name)
	if err != nil {
		// Not known: publish, and let the confirm tell.
		return true, ""
	}
	r.exchanges[name] = exchangeCheck{exists: exists, at: now}
	if !exists {
		return false, fmt.Sprintf("exchange %q does not exist", name)
	}
	return true, ""
}

// sentMessage is what onResult needs of a publish.
type sentMessage struct {
	id       int64
	replayID string
	// attempt is the message's unknown outcomes in this task before this
	// publish (ClaimedMessage.Unknowns); copyReplayCount the
	// x-dlq-replay-count the publish carried.
	attempt         int
	copyReplayCount int64
}

// onResult is called by the publisher with a publish's outcome. It must
// not block: it only queues the outcome for the settler.
func (r *taskRun) onResult(b *claimBatch, m sentMessage, res broker.Result) {
	r.s.metrics.inFlight.Dec()
	o := store.ReplayOutcome{ID: m.id, Token: b.token, Attempt: m.attempt}
	var label string
	switch res.Outcome {
	case broker.Acked:
		o.Result, label = store.OutcomePublished, resultPublished
	case broker.Returned:
		o.Result, o.Error, label = store.OutcomeFailed, res.Reason, resultUnroutable
	case broker.Nacked:
		// The broker refused responsibility for it: RabbitMQ lets the
		// publisher send it again, and a quorum queue that lost its
		// leader nacks messages it may yet have taken. Sent again like an
		// unknown outcome; the last refusal fails it.
		if r.sendAgain(m.attempt) {
			o.Result, o.Error, o.CopyReplayCount = store.OutcomeRetry, res.Reason, m.copyReplayCount
		} else {
			o.Result, o.Error, label = store.OutcomeFailed, res.Reason, resultNacked
		}
	case broker.Unknown:
		o.Result, o.Error = r.unknownOutcome(m.attempt, res.Reason)
		o.CopyReplayCount = m.copyReplayCount
		if o.Result == store.OutcomeUnknown {
			label = resultUnknown
		}
	case broker.Unsent:
		// It never left (the channel had closed under it): handed back,
		// the task publishes it again like any message not sent yet.
		r.record(b, store.ReplayOutcome{ID: m.id, Token: b.token, Result: store.OutcomeReleased}, "")
		return
	default:
		o.Result, o.Error, label = store.OutcomeFailed, res.Reason, resultFailed
	}
	if r.canary.Load() && (o.Result == store.OutcomePublished || o.Result == store.OutcomeRetry) {
		// The canary knows its own publishes by their replay ids when they
		// die again: every copy's.
		o.ReplayID = m.replayID
	}
	if m.attempt > 0 {
		r.s.metrics.replays.WithLabelValues(resultRepublished).Inc()
	}
	r.record(b, o, label)
}

// publishing builds what m is published as: the message itself, or, for an
// edit-then-replay task, its corrected copy. rid is the publish's replay id.
func (r *taskRun) publishing(m *store.ClaimedMessage) (rid string, msg amqp.Publishing, err error) {
	if err := r.s.open(m); err != nil {
		return "", amqp.Publishing{}, err
	}
	if len(r.task.Edit) == 0 {
		rid = newReplayID()
		msg, err = buildPublishing(*m, rid, r.s.cfg.KeepUserID)
		return rid, msg, err
	}
	edit, err := r.s.taskEdit(r.task)
	if err != nil {
		return "", amqp.Publishing{}, err
	}
	var e Edit
	if err := json.Unmarshal(edit, &e); err != nil {
		return "", amqp.Publishing{}, fmt.Errorf("the edit of task %d: %w", r.task.ID, err)
	}
	msg, err = EditedPublishing(*m, e, r.s.cfg.KeepUserID)
	return e.ReplayID, msg, err
}
