package broker

// What comes back on a publisher's channels: returns, confirms, a dead
// channel and confirm timeouts, each settling its publishes
// (publisher.go sends them).

import (
	"fmt"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// watch reads a channel's returns and confirms until it dies.
func (p *Publisher) watch(pc *pubChannel) {
	defer close(pc.done)
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	returns := pc.returns
	lastTick := time.Now()
	wasBlocked := false
	for {
		select {
		case r, ok := <-returns:
			if !ok {
				returns = nil
				continue
			}
			p.onReturn(pc, r)
		case c, ok := <-pc.confirms:
			if !ok {
				p.onDead(pc)
				return
			}
			// RabbitMQ sends a message's basic.return before its basic.ack,
			// and the library hands them over in that order, but from two
			// Go channels a select may pick the ack first: take every
			// return already waiting before deciding.
			p.drainReturns(pc)
			p.onConfirm(pc, c)
		case now := <-tick.C:
			// An interval blocked at either end is not held against the
			// timeout: the alarm may have cleared just before this tick, and
			// the broker has had no time to confirm what it held.
			blocked := p.cfg.Conn.Blocked()
			p.checkTimeouts(pc, now.Sub(lastTick), blocked || wasBlocked)
			lastTick, wasBlocked = now, blocked
		}
	}
}

func (p *Publisher) drainReturns(pc *pubChannel) {
	for {
		select {
		case r, ok := <-pc.returns:
			if !ok {
				return
			}
			p.onReturn(pc, r)
		default:
			return
		}
	}
}

func (p *Publisher) onReturn(pc *pubChannel, r amqp.Return) {
	corr, _ := r.Headers[p.cfg.CorrelationHeader].(string)
	p.mu.Lock()
	pb := pc.byCorr[corr]
	if pb != nil {
		rc := r
		pb.returned = &rc
	}
	p.mu.Unlock()
	if pb == nil {
		p.log.Warn("basic.return for no publish in flight", "exchange", r.Exchange, "routing_key", r.RoutingKey,
			"reply_code", r.ReplyCode, "reply_text", r.ReplyText)
	}
}

func (p *Publisher) onConfirm(pc *pubChannel, c amqp.Confirmation) {
	p.mu.Lock()
	pb := pc.pending[c.DeliveryTag]
	if pb != nil {
		delete(pc.pending, c.DeliveryTag)
		delete(pc.byCorr, pb.corr)
	}
	if !c.Ack && !pc.retired {
		// A nack is the broker refusing responsibility for a message a
		// queue could not take. A quorum queue whose leader was lost goes
		// on refusing every later publish on a channel that knew the old
		// leader, for as long as the channel lives (seen with RabbitMQ
		// 3.10, for minutes); a new channel looks the queue up afresh. So
		// nothing more is sent on this one: it closes once its last
		// publish has its outcome.
		pc.retired = true
		p.retired[pc] = true
		p.log.Warn("the broker refused a message (basic.nack); publishing on a new channel", "in_flight", len(pc.pending))
	}
	drained := pc.retired && len(pc.pending) == 0
	p.mu.Unlock()
	if drained {
		defer func() { _ = pc.ch.Close() }()
	}
	if pb == nil {
		return
	}
	switch {
	case pb.returned != nil:
		p.deliver(pb, Result{Outcome: Returned, Reason: fmt.Sprintf("unroutable: exchange %q routing key %q: %d %s",
			pb.returned.Exchange, pb.returned.RoutingKey, pb.returned.ReplyCode, pb.returned.ReplyText)})
	case c.Ack:
		p.deliver(pb, Result{Outcome: Acked})
	default:
		p.deliver(pb, Result{Outcome: Nacked, Reason: "the broker refused the message (basic.nack)"})
	}
}

// onDead ends every publish still in flight on a channel that died. A
// message refused because its exchange does not exist, or because the
// connection's user may not write to it (403 ACCESS_REFUSED names the
// exchange), was not delivered: the broker checks both before routing, and
// a publish to the same exchange sent earlier would have been refused
// first, one sent later was discarded with the channel. Any other was sent
// and may have been routed before the end: Unknown.
func (p *Publisher) onDead(pc *pubChannel) {
	var cause *amqp.Error
	select {
	case cause = <-pc.closes:
	default:
	}
	p.mu.Lock()
	reason := "connection or channel closed"
	switch {
	case cause != nil:
		reason = fmt.Sprintf("channel closed: %d %s", cause.Code, cause.Reason)
	case pc.timedOut:
		reason = fmt.Sprintf("no confirm within the confirm timeout (%s): channel closed", p.cfg.ConfirmTimeout)
	}
	pc.dead = true
	pc.cause = reason
	delete(p.retired, pc)
	left := make([]*publish, 0, len(pc.pending))
	for _, pb := range pc.pending {
		left = append(left, pb)
	}
	pc.pending, pc.byCorr = map[uint64]*publish{}, map[string]*publish{}
	p.mu.Unlock()
	if len(left) > 0 {
		p.log.Warn("publisher channel closed with publishes unconfirmed", "in_flight", len(left), "reason", reason)
	}
	for _, pb := range left {
		switch {
		case cause != nil && cause.Code == amqp.NotFound && strings.Contains(cause.Reason, "exchange '"+pb.exchange+"'"):
			p.deliver(pb, Result{Outcome: Failed, Reason: fmt.Sprintf("exchange %q does not exist (%s)", pb.exchange, cause.Reason)})
		case cause != nil && cause.Code == amqp.AccessRefused && strings.Contains(cause.Reason, "exchange '"+pb.exchange+"'"):
			p.deliver(pb, Result{Outcome: Failed, Reason: fmt.Sprintf("refused: %d %s", cause.Code, cause.Reason)})
		case pb.returned != nil:
			p.deliver(pb, Result{Outcome: Returned, Reason: fmt.Sprintf("unroutable: %d %s", pb.returned.ReplyCode, pb.returned.ReplyText)})
		default:
			p.deliver(pb, Result{Outcome: Unknown, Reason: "outcome unknown: " + reason + " before the broker confirmed the message; it may have been delivered"})
		}
	}
}

func (p *Publisher) checkTimeouts(pc *pubChannel, elapsed time.Duration, blocked bool) {
	p.mu.Lock()
	expired := false
	now := time.Now()
	for _, pb := range pc.pending {
		if blocked {
			pb.blocked += elapsed
			continue
		}
		if now.Sub(pb.sentAt)-pb.blocked > p.cfg.ConfirmTimeout {
			expired = true
		}
	}
	if expired {
		pc.timedOut = true
	}
	p.mu.Unlock()
	if expired {
		// Closing the channel ends every publish on it as Unknown (onDead):
		// a confirm arriving later could not be told apart.
		p.log.Warn("publish not confirmed in time; closing the channel", "timeout", p.cfg.ConfirmTimeout)
		_ = pc.ch.Close()
	}
}

func (p *Publisher) deliver(pb *publish, r Result) {
	defer p.finished()
	if pb.done != nil {
		pb.done(r)
	}
}

func (p *Publisher) finished() {
	<-p.slots
	p.mu.Lock()
	p.active--
	p.idle.Broadcast()
	p.mu.Unlock()
}
