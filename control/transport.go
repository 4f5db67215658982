package control

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/ThreeDotsLabs/watermill"
	"github.com/ThreeDotsLabs/watermill/message"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
)

// Metadata keys the marshaler sets on a Watermill message. Properties and
// headers travel as dlq's typed JSON, so nothing is lost on the way in and
// a message marshalled back gets the very same values.
const (
	MetaProperties    = "amqp_properties"     // broker.Properties JSON
	MetaHeaders       = "amqp_headers"        // broker.AppendHeadersJSON JSON
	MetaReplyTo       = "amqp_reply_to"       // convenience copy of the property
	MetaCorrelationID = "amqp_correlation_id" // convenience copy of the property
)

// Marshaler converts between AMQP deliveries and Watermill messages
// without loss. Watermill metadata is a string map: the default AMQP
// marshaler keeps only string headers (and fails on others, such as a
// client that sends its token as bytes), so this one keeps the whole header
// table and every property as typed JSON instead.
type Marshaler struct{}

// Unmarshal builds a Watermill message from a delivery.
func (Marshaler) Unmarshal(d amqp.Delivery) (*message.Message, error) {
	hj, err := broker.AppendHeadersJSON(nil, d.Headers)
	if err != nil {
		return nil, fmt.Errorf("replay: encode headers of control message: %w", err)
	}
	id := d.MessageId
	if id == "" {
		id = watermill.NewUUID()
	}
	msg := message.NewMessage(id, d.Body)
	msg.Metadata.Set(MetaHeaders, string(hj))
	msg.Metadata.Set(MetaProperties, string(broker.PropertiesOf(&d).AppendJSON(nil)))
	msg.Metadata.Set(MetaReplyTo, d.ReplyTo)
	msg.Metadata.Set(MetaCorrelationID, d.CorrelationId)
	return msg, nil
}

// Marshal is the inverse of Unmarshal.
func (Marshaler) Marshal(msg *message.Message) (amqp.Publishing, error) {
	var pub amqp.Publishing
	if pj := msg.Metadata.Get(MetaProperties); pj != "" {
		p, err := broker.ParsePropertiesJSON([]byte(pj))
		if err != nil {
			return amqp.Publishing{}, err
		}
		pub = p.Publishing()
	}
	if hj := msg.Metadata.Get(MetaHeaders); hj != "" {
		h, err := broker.DecodeHeadersJSON([]byte(hj))
		if err != nil {
			return amqp.Publishing{}, err
		}
		pub.Headers = h
	}
	pub.Body = msg.Payload
	return pub, nil
}

// Subscriber is a Watermill message.Subscriber over broker.Conn: it
// consumes a queue with manual acknowledgement, one message at a time, and
// follows the connection as broker.Conn reconnects. It exists so that the
// control queue rides the program's one reconnect layer rather than
// watermill-amqp's own. Ack acknowledges the delivery; Nack rejects it
// without requeue, so a message that fails can never loop. A handler may
// instead take the delivery (takeDelivery) to settle it later, off the
// consumer, which then goes on with the next message.
type Subscriber struct {
	conn   *broker.Conn
	log    *slog.Logger
	marsh  Marshaler
	wg     sync.WaitGroup
	mu     sync.Mutex
	closed bool
	done   chan struct{}
}

var _ message.Subscriber = (*Subscriber)(nil)

// NewSubscriber returns a Subscriber on conn.
func NewSubscriber(conn *broker.Conn, log *slog.Logger) *Subscriber {
	return &Subscriber{conn: conn, log: cmp.Or(log, slog.Default()), done: make(chan struct{})}
}

// Subscribe consumes queue (declaring it, durable quorum, if missing)
// until ctx ends or Close is called; then the returned channel closes.
func (s *Subscriber) Subscribe(ctx context.Context, queue string) (<-chan *message.Message, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return nil, errors.New("replay: subscriber closed")
	}
	out := make(chan *message.Message)
	ctx, cancel := context.WithCancel(ctx)
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(out)
		defer cancel()
		go func() {
			select {
			case <-s.done:
				cancel()
			case <-ctx.Done():
			}
		}()
		s.consume(ctx, queue, out)
	}()
	return out, nil
}

func (s *Subscriber) consume(ctx context.Context, queue string, out chan<- *message.Message) {
	backoff := 100 * time.Millisecond
	for ctx.Err() == nil {
		err := s.consumeOnce(ctx, queue, out)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errTaken) {
			// Its channel is the taker's now; go on on a new one.
			backoff = 100 * time.Millisecond
			continue
		}
		s.log.Warn("control queue consumer stopped; starting again", "queue", queue, "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 5*time.Second)
	}
}

// errTaken ends a consumption whose last delivery a handler took, with
// the channel it must be settled on.
var errTaken = errors.New("delivery taken by its handler")

func (s *Subscriber) consumeOnce(ctx context.Context, queue string, out chan<- *message.Message) error {
	ch, err := s.conn.Channel(ctx)
	if err != nil {
		return err
	}
	var h *held // the last delivery handed out
	defer func() {
		if h == nil || !h.isTaken() {
			_ = ch.Close()
		}
	}()
	if _, err := ch.QueueDeclare(queue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"}); err != nil {
		return fmt.Errorf("declare control queue %q: %w", queue, err)
	}
	// One command at a time per subscription: a handler never waits behind
	// deliveries it has not asked for, and a crash leaves at most one
	// command unacknowledged on it (and one on each channel taken by a
	// handler: takeDelivery).
	if err := ch.Qos(1, 0, false); err != nil {
		return err
	}
	tag := "dlq-control-" + watermill.NewShortUUID()
	deliveries, err := ch.Consume(queue, tag, false, false, false, false, nil)
	if err != nil {
		return fmt.Errorf("consume control queue %q: %w", queue, err)
	}
	for {
		var d amqp.Delivery
		var ok bool
		select {
		case <-ctx.Done():
			return nil
		case d, ok = <-deliveries:
			if !ok {
				return errors.New("channel closed")
			}
		}
		msg, err := s.marsh.Unmarshal(d)
		if err != nil {
			// A header table dlq cannot encode: the body alone still makes a
			// command, answered like any other.
			msg = message.NewMessage(watermill.NewUUID(), d.Body)
			msg.Metadata.Set(MetaReplyTo, d.ReplyTo)
			msg.Metadata.Set(MetaCorrelationID, d.CorrelationId)
		}
		h = &held{d: d, ch: ch, tag: tag}
		mctx, cancel := context.WithCancel(context.WithValue(ctx, heldKey{}, h))
		msg.SetContext(mctx)
		select {
		case out <- msg:
		case <-ctx.Done():
			cancel()
			return nil
		}
		select {
		case <-msg.Acked():
			err = h.settle(d.Ack)
		case <-msg.Nacked():
			err = h.settle(d.Reject)
		case <-ctx.Done():
			// Unacknowledged: RabbitMQ gives it to another consumer, and
			// its command_id makes the repeat harmless.
			cancel()
			return nil
		}
		cancel()
		if err != nil {
			return err
		}
	}
}

// heldKey is the context key of a message's *held.
type heldKey struct{}

// held is the delivery behind a message the Subscriber handed out.
type held struct {
	d     amqp.Delivery
	ch    *amqp.Channel
	tag   string
	mu    sync.Mutex
	taken bool
}

func (h *held) isTaken() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.taken
}

// settle settles the delivery the router acknowledged or rejected with
// f, unless its handler took it: then it returns errTaken, and the
// consumer leaves the channel to the taker.
func (h *held) settle(f func(multiple bool) error) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.taken {
		return errTaken
	}
	return f(false)
}

// taken is a delivery its handler took off the consumer, to answer it
// later without holding the consumer meanwhile. It keeps the channel the
// delivery came on, with no consumer left on it: a delivery can only be
// settled there, and a channel closed by a lost connection (RabbitMQ then
// gives the delivery to a consumer again) refuses to settle it, so a
// delivery from before a reconnect is never acknowledged. Exactly one of
// Ack and Release settles it.
type taken struct {
	d    amqp.Delivery
	ch   *amqp.Channel
	lost chan *amqp.Error
	once sync.Once
}

// takeDelivery takes msg's delivery from the Subscriber that handed it
// out: its consumer stops (so that the channel takes no other message)
// and, once the router settles msg, goes on on a new channel. It fails
// for a message of another subscriber, one already settled, or when the
// channel is gone (the delivery is then redelivered).
func takeDelivery(msg *message.Message) (*taken, error) {
	h, ok := msg.Context().Value(heldKey{}).(*held)
	if !ok {
		return nil, errors.New("control: message not from a control Subscriber")
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.taken {
		return nil, errors.New("control: delivery already taken")
	}
	if err := h.ch.Cancel(h.tag, false); err != nil {
		return nil, fmt.Errorf("control: stop consumer %s to take its delivery: %w", h.tag, err)
	}
	h.taken = true
	return &taken{d: h.d, ch: h.ch, lost: h.ch.NotifyClose(make(chan *amqp.Error, 1))}, nil
}

// Lost is closed when the delivery's channel closes: it went back to the
// queue and will be delivered again.
func (t *taken) Lost() <-chan *amqp.Error { return t.lost }

// Ack acknowledges the delivery and closes its channel.
func (t *taken) Ack() error {
	err := errors.New("control: delivery already settled")
	t.once.Do(func() {
		err = t.d.Ack(false)
		_ = t.ch.Close()
	})
	return err
}

// Release closes the delivery's channel without settling it: RabbitMQ
// delivers it again.
func (t *taken) Release() {
	t.once.Do(func() { _ = t.ch.Close() })
}

// Close ends every subscription and waits for them.
func (s *Subscriber) Close() error {
	s.mu.Lock()
	if !s.closed {
		s.closed = true
		close(s.done)
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// replier publishes answers on a channel of its own. Answers are not
// confirmed: a client that misses one retries with the same command_id and
// gets the stored answer.
type replier struct {
	conn *broker.Conn
	mu   sync.Mutex
	ch   *amqp.Channel
}

func (r *replier) send(ctx context.Context, replyTo, correlationID string, body []byte) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	pub := amqp.Publishing{ContentType: "application/json", CorrelationId: correlationID, Body: body, Timestamp: time.Now()}
	var err error
	for attempt := 0; attempt < 2; attempt++ {
		if r.ch == nil || r.ch.IsClosed() {
			if r.ch, err = r.conn.Channel(ctx); err != nil {
				return err
			}
		}
		if err = r.ch.PublishWithContext(ctx, "", replyTo, false, false, pub); err == nil {
			return nil
		}
		_ = r.ch.Close()
		r.ch = nil
	}
	return err
}

func (r *replier) close() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ch != nil {
		_ = r.ch.Close()
		r.ch = nil
	}
}
