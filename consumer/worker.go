package consumer

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// worker is one consumer of one queue. It runs sessions, one per channel,
// until its context ends.
type worker struct {
	c     *Consumer
	queue string
	tag   string

	mu         sync.Mutex
	subscribed bool
	writeErr   error
}

func (w *worker) health() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.writeErr != nil {
		return fmt.Errorf("cannot write to PostgreSQL: %w", w.writeErr)
	}
	if !w.subscribed {
		return fmt.Errorf("not subscribed to queue %q", w.queue)
	}
	return nil
}

func (w *worker) setSubscribed(b bool) {
	w.mu.Lock()
	w.subscribed = b
	w.mu.Unlock()
	w.c.updateUp()
}

func (w *worker) setWriteErr(err error) {
	w.mu.Lock()
	changed := (w.writeErr == nil) != (err == nil)
	w.writeErr = err
	w.mu.Unlock()
	if changed {
		w.c.updateUp()
	}
}

func (w *worker) run(ctx context.Context) {
	log := w.c.log.With("queue", w.queue, "consumer_tag", w.tag)
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		started := time.Now()
		err := w.session(ctx)
		w.setSubscribed(false)
		// A write error belongs to the batch the session held, which the
		// broker redelivers now; the next session's writes say afresh
		// whether PostgreSQL works.
		w.setWriteErr(nil)
		if ctx.Err() != nil {
			return
		}
		if err != nil {
			log.Warn("consumer session ended; starting a new one", "error", err, "retry_in", backoff)
		}
		if time.Since(started) > time.Minute {
			backoff = 100 * time.Millisecond
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// pending is a batch being built or written.
type pending struct {
	batch   store.IngestBatch
	lastTag uint64
	bytes   int
	queue   string
}

// session consumes on one channel until the channel dies or ctx ends.
func (w *worker) session(ctx context.Context) error {
	cfg := &w.c.cfg
	ch, err := cfg.Conn.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	closed := ch.NotifyClose(make(chan *amqp.Error, 1))
	deliveries, err := w.subscribe(ctx, ch)
	if err != nil {
		return err
	}
	w.setSubscribed(true)

	// dead is closed when the channel is gone; the writer then stops
	// acknowledging and abandons what it holds.
	dead := make(chan struct{})
	var deadErr error
	go func() {
		if e, ok := <-closed; ok && e != nil {
			deadErr = e
		}
		close(dead)
	}()

	// Unbuffered: a batch changes hands only when the writer is free, so
	// while it writes, the next batch keeps filling instead of being cut
	// at the linger (small batches cost a commit each).
	ready := make(chan *pending)
	// amqp091-go matches a synchronous method's reply to whichever call
	// reads it first, so two at once on one channel (the writer's basic.qos,
	// our basic.cancel) can swap replies and both fail: the writer then
	// stops acknowledging, and its last batches go back to the queue
	// although they were committed. One at a time.
	var rpc sync.Mutex
	wr := &writer{w: w, ch: ch, dead: dead, rpc: &rpc}
	writerDone := make(chan struct{})
	stop := make(chan struct{}) // closed when the writer must give up
	var stopOnce sync.Once
	stopNow := func() { stopOnce.Do(func() { close(stop) }) }
	go func() {
		defer close(writerDone)
		wr.run(ready, stop)
	}()

	cur := w.newPending()
	due := false // cur's linger has passed
	linger := time.NewTimer(time.Hour)
	linger.Stop()
	defer linger.Stop()
	flush := func() {
		if len(cur.batch.Messages) == 0 {
			return
		}
		linger.Stop()
		select {
		case ready <- cur:
		case <-dead:
		case <-stop:
		}
		cur = w.newPending()
		due = false
	}
	finish := func(graceful bool) error {
		if graceful {
			flush()
		} else {
			stopNow()
		}
		close(ready)
		<-writerDone
		return nil
	}

	cancelled := false
	for {
		n := len(cur.batch.Messages)
		full := n >= cfg.BatchSize || cur.bytes >= cfg.BatchBytes
		// A full batch stops the intake until the writer takes it; a
		// lingered one goes as soon as the writer is free.
		in := deliveries
		if full {
			in = nil
		}
		var handOver chan<- *pending
		if n > 0 && (full || due) {
			handOver = ready
		}
		select {
		case handOver <- cur:
			linger.Stop()
			due = false
			cur = w.newPending()
		case d, ok := <-in:
			if !ok && cancelled {
				// Every delivery of this subscription was read: finish the
				// batches and acknowledge them on the live channel, and
				// keep it open until RabbitMQ applied the acks (settle.go).
				err := finish(true)
				w.c.awaitSettled(w.queue, stop, dead)
				return err
			}
			if !ok {
				finish(false)
				select {
				case <-dead:
					return fmt.Errorf("channel closed: %w", errOr(deadErr, "closed"))
				default:
					return errors.New("subscription cancelled by the broker (queue deleted?)")
				}
			}
			m, rt := convert(&d, w.queue, cfg.Now(), cfg.Conn)
			categorizeDelivery(cfg.Categories, &m, &d, rt)
			if len(cur.batch.Messages) == 0 {
				linger.Reset(cfg.Linger)
				due = false
			}
			cur.batch.Messages = append(cur.batch.Messages, m)
			cur.lastTag = d.DeliveryTag
			cur.bytes += len(d.Body)
		case <-linger.C:
			due = true
		case <-dead:
			finish(false)
			return fmt.Errorf("channel closed: %w", errOr(deadErr, "closed"))
		case <-ctx.Done():
			if cancelled {
				// Already draining; ctx only fires once.
				continue
			}
			cancelled = true
			grace := time.AfterFunc(cfg.ShutdownTimeout, stopNow)
			defer grace.Stop()
			// Stop the flow; the deliveries channel closes once the
			// broker confirms, after every delivery already sent.
			rpc.Lock()
			err := ch.Cancel(w.tag, false)
			rpc.Unlock()
			if err != nil {
				return finish(true)
			}
			ctx = context.Background()
		}
	}
}

// subscribe sets the channel's prefetch and starts consuming w's queue.
// When the queue is gone (deleted by hand), it declares it again before
// returning the error, so that the session's next try finds it.
func (w *worker) subscribe(ctx context.Context, ch *amqp.Channel) (<-chan amqp.Delivery, error) {
	cfg := &w.c.cfg
	if err := ch.Qos(cfg.Prefetch, 0, false); err != nil {
		return nil, fmt.Errorf("set prefetch %d: %w", cfg.Prefetch, err)
	}
	deliveries, err := ch.Consume(w.queue, w.tag, false, false, false, false, nil)
	if err != nil {
		var ae *amqp.Error
		if errors.As(err, &ae) && ae.Code == amqp.NotFound {
			derr := broker.DeclareOwnQueue(ctx, cfg.Conn, cfg.Exchange, w.queue, broker.OwnQueueArgs(cfg.Conn.ServerVersion()))
			return nil, errors.Join(fmt.Errorf("consume %q: %w", w.queue, err), derr)
		}
		return nil, fmt.Errorf("consume %q: %w", w.queue, err)
	}
	return deliveries, nil
}

func (w *worker) newPending() *pending {
	return &pending{
		batch: store.IngestBatch{
			ID:       store.NewBatchID(),
			Consumer: w.tag,
			Messages: make([]store.NewMessage, 0, w.c.cfg.BatchSize),
		},
		queue: w.queue,
	}
}

func errOr(err error, s string) error {
	if err != nil {
		return err
	}
	return errors.New(s)
}
