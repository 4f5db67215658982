package consumer

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// Waiting at shutdown until RabbitMQ has applied the final acknowledgements.
//
// The basic.qos round trip after an ack proves that the channel handled the
// ack, not that a quorum queue applied it: a RabbitMQ channel holds
// settlements back while too many of its earlier commands wait for the
// queue's Raft log (32 by default, reached when the disk is slow), and it
// drops what it still holds when it closes; the queue then returns those
// messages and they are delivered again (RabbitMQ issue #10327, seen here
// with 3.10). At shutdown the channel closes milliseconds after the last
// ack, so the last batches came back although they were committed and
// acknowledged.
//
// What a client can see is the queue's consumer count: a cancelled quorum
// queue consumer is counted until every delivery it holds is settled. So
// before cancelling, Run notes how many consumers each queue has; each
// consumer then drains, commits and acknowledges, and keeps its channel open
// until the count has fallen by this process's consumers (or settleTimeout,
// or the shutdown deadline). Another instance's consumers joining or leaving
// meanwhile can make that wait longer or shorter than needed; neither costs
// more than a redelivery, because the batches acknowledged at the end of a
// session stay in ingest_inflight (writer.run), so a redelivery of them is
// recognised as stored.

// settleTimeout bounds the wait for one queue.
const settleTimeout = 10 * time.Second

// settlePoll is how often the consumer count is read while waiting.
const settlePoll = 20 * time.Millisecond

// settleGate is one queue's shutdown wait.
type settleGate struct {
	queue string
	// target is the consumer count once every consumer of this process has
	// settled and gone: the count before cancelling minus ours.
	target int
	once   sync.Once
	done   chan struct{}
}

// noteConsumers records, before the consumers cancel, how many consumers
// each queue has and how many of them are ours.
func (c *Consumer) noteConsumers() {
	c.mu.Lock()
	ours := map[string]int{}
	for _, w := range c.workers {
		w.mu.Lock()
		if w.subscribed {
			ours[w.queue]++
		}
		w.mu.Unlock()
	}
	c.mu.Unlock()
	// RabbitMQ may be unreachable right now: shutdown must not wait long
	// for a figure it can do without.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	gates := map[string]*settleGate{}
	for q, n := range ours {
		total, err := c.consumerCount(ctx, q)
		if err != nil {
			c.log.Warn("cannot read the queue's consumers before shutdown; not waiting for the final acknowledgements to be applied", "queue", q, "error", err)
			continue
		}
		gates[q] = &settleGate{queue: q, target: total - n, done: make(chan struct{})}
	}
	c.mu.Lock()
	c.gates = gates
	c.mu.Unlock()
}

// awaitSettled keeps the caller's channel open until RabbitMQ has applied
// the final acknowledgements of every consumer of this process on queue, or
// stop or dead closes.
func (c *Consumer) awaitSettled(queue string, stop, dead <-chan struct{}) {
	c.mu.Lock()
	g := c.gates[queue]
	c.mu.Unlock()
	if g == nil {
		return
	}
	g.once.Do(func() { go c.pollSettled(g) })
	select {
	case <-g.done:
	case <-stop:
	case <-dead:
	}
}

func (c *Consumer) pollSettled(g *settleGate) {
	defer close(g.done)
	start := time.Now()
	ctx, cancel := context.WithTimeout(context.Background(), settleTimeout)
	defer cancel()
	log := c.log.With("queue", g.queue)
	last := -1
	for {
		n, err := c.consumerCount(ctx, g.queue)
		if err == nil {
			last = n
			if n <= g.target {
				log.Info("final acknowledgements applied by RabbitMQ", "waited", time.Since(start).Round(time.Millisecond))
				return
			}
		}
		select {
		case <-ctx.Done():
			log.Warn("RabbitMQ did not show the final acknowledgements applied in time; it may deliver those messages again, and they will be recognised as stored",
				"waited", time.Since(start).Round(time.Millisecond), "consumers", last, "expected_at_most", g.target, "error", err)
			return
		case <-time.After(settlePoll):
		}
	}
}

// consumerCount reads queue's consumer count with a passive declare on a
// channel of its own (a failed passive declare closes its channel).
func (c *Consumer) consumerCount(ctx context.Context, queue string) (int, error) {
	ch, err := c.cfg.Conn.Channel(ctx)
	if err != nil {
		return 0, err
	}
	defer func() { _ = ch.Close() }()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	if err != nil {
		return 0, fmt.Errorf("inspect queue %q: %w", queue, err)
	}
	return q.Consumers, nil
}
