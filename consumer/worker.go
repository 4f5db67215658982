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
	ch, err := w.c.cfg.Conn.Channel(ctx)
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
	s := w.startSession(ch, closed)
	defer s.stopTimers()
	return s.consume(ctx, deliveries)
}

// channelSession is one session's state: the batch being filled, the
// writer it hands batches to, and the signals that end both.
type channelSession struct {
	w  *worker
	ch *amqp.Channel
	// dead is closed when the channel is gone, with deadErr set first
	// when the broker said why; the writer then stops acknowledging and
	// abandons what it holds.
	dead    chan struct{}
	deadErr error
	// ready hands batches to the writer. Unbuffered: a batch changes
	// hands only when the writer is free, so while it writes, the next
	// batch keeps filling instead of being cut at the linger (small
	// batches cost a commit each).
	ready chan *pending
	// spare takes back a batch the writer is done with, so that the next
	// one reuses its slice: a new one per batch was a twentieth of what
	// ingest allocated.
	spare      chan *pending
	writerDone chan struct{}
	stop       chan struct{} // closed when the writer must give up
	stopOnce   sync.Once
	// amqp091-go matches a synchronous method's reply to whichever call
	// reads it first, so two at once on one channel (the writer's
	// basic.qos, our basic.cancel) can swap replies and both fail: the
	// writer then stops acknowledging, and its last batches go back to the
	// queue although they were committed. One at a time.
	rpc    sync.Mutex
	cur    *pending
	due    bool // cur's linger has passed
	linger *time.Timer
	grace  *time.Timer // set once the drain at shutdown began
}

// startSession starts the watch on ch's closing and the session's writer.
func (w *worker) startSession(ch *amqp.Channel, closed <-chan *amqp.Error) *channelSession {
	s := &channelSession{
		w:          w,
		ch:         ch,
		dead:       make(chan struct{}),
		ready:      make(chan *pending),
		spare:      make(chan *pending, 1),
		writerDone: make(chan struct{}),
		stop:       make(chan struct{}),
	}
	go func() {
		if e, ok := <-closed; ok && e != nil {
			s.deadErr = e
		}
		close(s.dead)
	}()
	wr := &writer{w: w, ch: ch, dead: s.dead, rpc: &s.rpc}
	go func() {
		defer close(s.writerDone)
		wr.run(s.ready, s.spare, s.stop)
	}()
	s.cur = s.newBatch()
	s.linger = time.NewTimer(time.Hour)
	s.linger.Stop()
	return s
}

// consume fills batches from deliveries and hands them to the writer
// until the channel dies, the broker cancels the subscription, or the
// drain that ctx's end starts is over.
func (s *channelSession) consume(ctx context.Context, deliveries <-chan amqp.Delivery) error {
	cfg := &s.w.c.cfg
	// done is the context's end until it came: the drain then runs to its
	// own end, whatever the context does.
	done := ctx.Done()
	cancelled := false
	for {
		n := len(s.cur.batch.Messages)
		full := n >= cfg.BatchSize || s.cur.bytes >= cfg.BatchBytes
		// A full batch stops the intake until the writer takes it; a
		// lingered one goes as soon as the writer is free.
		in := deliveries
		if full {
			in = nil
		}
		var handOver chan<- *pending
		if n > 0 && (full || s.due) {
			handOver = s.ready
		}
		select {
		case handOver <- s.cur:
			s.linger.Stop()
			s.due = false
			s.cur = s.newBatch()
		case d, ok := <-in:
			if !ok {
				return s.subscriptionEnded(cancelled)
			}
			s.add(&d)
		case <-s.linger.C:
			s.due = true
		case <-s.dead:
			s.finish(false)
			return fmt.Errorf("channel closed: %w", errOr(s.deadErr, "closed"))
		case <-done:
			cancelled, done = true, nil
			if err := s.cancelSubscription(cfg.ShutdownTimeout); err != nil {
				// The context has ended, so run stops without reading the
				// error.
				s.finish(true)
				return nil
			}
		}
	}
}

// add converts and categorises d and appends it to the batch being
// filled, starting the batch's linger when it is the first.
func (s *channelSession) add(d *amqp.Delivery) {
	cfg := &s.w.c.cfg
	m, rt := convert(d, s.w.queue, cfg.Now(), cfg.Conn)
	categorizeDelivery(cfg.Categories, &m, d, rt)
	if len(s.cur.batch.Messages) == 0 {
		s.linger.Reset(cfg.Linger)
		s.due = false
	}
	s.cur.batch.Messages = append(s.cur.batch.Messages, m)
	s.cur.lastTag = d.DeliveryTag
	s.cur.bytes += len(d.Body)
}

// subscriptionEnded ends the session once its deliveries channel closed:
// at shutdown (cancelled) after every delivery of the subscription was
// read, else because the channel died or the broker cancelled it.
func (s *channelSession) subscriptionEnded(cancelled bool) error {
	if cancelled {
		// Finish the batches and acknowledge them on the live channel, and
		// keep it open until RabbitMQ applied the acks (settle.go).
		s.finish(true)
		s.w.c.awaitSettled(s.w.queue, s.stop, s.dead)
		return nil
	}
	s.finish(false)
	select {
	case <-s.dead:
		return fmt.Errorf("channel closed: %w", errOr(s.deadErr, "closed"))
	default:
		return errors.New("subscription cancelled by the broker (queue deleted?)")
	}
}

// cancelSubscription stops the flow at shutdown: the deliveries channel
// closes once the broker confirms, after every delivery already sent. The
// writer gives up what it still holds after grace.
func (s *channelSession) cancelSubscription(grace time.Duration) error {
	s.grace = time.AfterFunc(grace, s.stopWriter)
	s.rpc.Lock()
	err := s.ch.Cancel(s.w.tag, false)
	s.rpc.Unlock()
	return err
}

// stopWriter makes the writer give up what it holds.
func (s *channelSession) stopWriter() { s.stopOnce.Do(func() { close(s.stop) }) }

// flush hands the batch being filled, if any, to the writer.
func (s *channelSession) flush() {
	if len(s.cur.batch.Messages) == 0 {
		return
	}
	s.linger.Stop()
	select {
	case s.ready <- s.cur:
	case <-s.dead:
	case <-s.stop:
	}
	s.cur = s.newBatch()
	s.due = false
}

// finish ends the writer: gracefully after the last batch, else at once,
// abandoning what it holds.
func (s *channelSession) finish(graceful bool) {
	if graceful {
		s.flush()
	} else {
		s.stopWriter()
	}
	close(s.ready)
	<-s.writerDone
}

// stopTimers releases the session's timers when it ends.
func (s *channelSession) stopTimers() {
	s.linger.Stop()
	if s.grace != nil {
		s.grace.Stop()
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

// newBatch is an empty batch to fill: the writer's spare one when it gave
// one back, else a new one.
func (s *channelSession) newBatch() *pending {
	select {
	case p := <-s.spare:
		p.batch.ID = store.NewBatchID()
		return p
	default:
		return s.w.newPending()
	}
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
