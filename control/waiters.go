package control

import (
	"context"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill/message"
)

// maxWaiting bounds the repeats of running commands that wait off their
// consumers at once, per Control: each holds a goroutine, an AMQP channel
// with its one unacknowledged delivery and, should the first's handler
// die, runs the command. Past it, a consumer waits for a repeat itself,
// as every consumer once did, rather than take more without bound.
const maxWaiting = 32

// waiters wait for running commands on behalf of the consumers. A repeat
// of a command still running (a client's retry, RabbitMQ's redelivery
// after a lost channel) waits for the first's answer, or for its
// reservation to lapse, which can take as long as the command: a replay
// of a million, an export. Its consumer waited itself, and took no other
// command meanwhile.
type waiters struct {
	c     *Control
	ctx   context.Context
	slots chan struct{}
	wg    sync.WaitGroup
	// mu orders wg.Add against wait: watermill's Router.Run returns after
	// its CloseTimeout even while a handler still runs, and that handler
	// may then hand a repeat over. closed, set by wait, turns it away.
	mu     sync.Mutex
	closed bool
}

// newWaiters returns the waiters of a Run; they stop when ctx ends.
func (c *Control) newWaiters(ctx context.Context) *waiters {
	return &waiters{c: c, ctx: ctx, slots: make(chan struct{}, maxWaiting)}
}

// wait refuses any further repeat (take returns false) and waits for
// every waiter to end, after their context ended.
func (w *waiters) wait() {
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.wg.Wait()
}

// enter counts a new waiter, unless wait was called: no waiter starts
// after it, so none outlives Run.
func (w *waiters) enter() bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return false
	}
	w.wg.Add(1)
	return true
}

// take hands p, a repeat of a running command, to a waiter, with msg's
// delivery, and reports whether it did: then the waiter answers msg and
// settles its delivery, and the consumer goes on. When every waiter is
// busy, or the delivery cannot be taken, the consumer waits itself.
//
// After wait (Run is returning, and a handler outlived the router's
// CloseTimeout) it takes nothing: the consumer handles the repeat as it
// would without waiters. Its context ended with the router's (the router
// cancels it before it waits for its handlers), so it answers at once
// unavailable (retry with the same command_id), and its delivery, never
// acknowledged (its subscription ended and closed its channel), goes back
// to the queue. Releasing it unanswered instead would take a delivery
// whose channel is most likely gone already.
func (w *waiters) take(msg *message.Message, p pending) bool {
	if !w.enter() {
		return false
	}
	select {
	case w.slots <- struct{}{}:
	default:
		w.wg.Done()
		w.c.log.Warn("too many repeats of running commands waiting; this consumer waits for this one itself",
			"command_id", p.cmd.CommandID, "waiting", maxWaiting)
		return false
	}
	d, err := takeDelivery(msg)
	if err != nil {
		<-w.slots
		w.wg.Done()
		w.c.log.Warn("cannot take a repeated command off its consumer; the consumer waits for it", "command_id", p.cmd.CommandID, "error", err)
		return false
	}
	replyTo, corr := msg.Metadata.Get(MetaReplyTo), msg.Metadata.Get(MetaCorrelationID)
	go func() {
		defer w.wg.Done()
		defer func() { <-w.slots }()
		w.await(d, p, replyTo, corr, msg.Payload)
	}()
	return true
}

// await answers p once its first handler answered it, or runs it once that
// handler's reservation lapsed, then acknowledges its delivery. When the
// delivery's channel closes meanwhile (RabbitMQ gives the delivery to a
// consumer again, and that one answers it) or the Control stops, it gives
// up without answering; the delivery goes back to the queue.
func (w *waiters) await(d *taken, p pending, replyTo, corr string, body []byte) {
	wctx, cancel := context.WithCancel(w.ctx)
	defer cancel()
	go func() {
		select {
		case <-d.Lost():
			cancel()
		case <-wctx.Done():
		}
	}()
	p.res, p.err = w.c.reserve(wctx, p.cmd, p.caller.Principal.Name)
	if wctx.Err() != nil {
		w.abandon(p)
		d.Release()
		return
	}
	out := w.finish(p, body)
	if w.ctx.Err() != nil {
		// Stopping: the command was interrupted, or it finished and its
		// redelivery gets its recorded answer.
		d.Release()
		return
	}
	w.c.respond(w.ctx, replyTo, corr, out)
	if err := d.Ack(); err != nil {
		w.c.log.Warn("cannot acknowledge a repeated command; RabbitMQ delivers it again and it is answered again",
			"command_id", p.cmd.CommandID, "error", err)
	}
}

// abandon lets go of p's reservation if reserve took it over (the first's
// handler died) just as the channel closed or the Control stopped: p is
// not run here, and its redelivery would otherwise wait a whole
// CommandLease for this reservation to lapse before it runs.
func (w *waiters) abandon(p pending) {
	if p.err != nil || !p.res.Reserved {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(w.ctx), 10*time.Second)
	defer cancel()
	// By its hold: a reservation another handler holds by now (one that
	// an earlier dlq's stalled first handler forgot, then a redelivery
	// took) stays theirs.
	forgot, err := w.c.cfg.Commands.ForgetCommand(ctx, p.cmd.CommandID, p.res.Hold)
	switch {
	case err != nil:
		w.c.log.Warn("cannot let go of a repeated command given up; its redelivery runs it once its reservation expires",
			"command_id", p.cmd.CommandID, "error", err)
	case !forgot:
		w.c.log.Debug("a repeated command given up is no longer reserved here; nothing to let go", "command_id", p.cmd.CommandID)
	}
}

// finish is Control.finish with a panic turned into an internal error
// answer, as on the consumer.
func (w *waiters) finish(p pending, body []byte) (out outcome) {
	defer func() {
		if r := recover(); r != nil {
			out = w.c.panicked(r, body)
		}
	}()
	return w.c.finish(w.ctx, p)
}
