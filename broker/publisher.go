package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// PublisherConfig configures a Publisher.
type PublisherConfig struct {
	// Conn is the program's RabbitMQ connection. Required.
	Conn *Conn
	// Window bounds the publishes awaiting their confirm. Optional; default
	// 1000.
	Window int
	// CorrelationHeader names the header whose string value identifies a
	// publish, so that a basic.return can be matched to it. Every message
	// published must carry a value unique among the publishes in flight.
	// Optional; default HeaderReplayID.
	CorrelationHeader string
	// ConfirmTimeout ends a publish as Unknown when its confirm has not come
	// this long after it was sent, not counting time the connection spent
	// blocked by an alarm; the channel is then closed, so a late confirm can
	// never be taken for another publish. Optional; default 2 minutes.
	ConfirmTimeout time.Duration
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
}

// Outcome is what became of one publish.
type Outcome uint8

// Outcomes. Only Acked means delivered; Unknown means it may have been.
const (
	// Acked: the broker confirmed the message and routed it to at least one
	// queue.
	Acked Outcome = iota + 1
	// Returned: the message was unroutable (mandatory) and was not
	// delivered anywhere.
	Returned
	// Nacked: the broker refused the message; it was not delivered.
	Nacked
	// Failed: the broker refused the message because its exchange does not
	// exist, or because the connection's user may not write to it; it was
	// not delivered.
	Failed
	// Unknown: the message was sent but its confirm never came (the channel
	// or connection was lost first, or it timed out). It may have been
	// delivered.
	Unknown
	// Unsent: the message never left, because the channel or connection
	// had closed under it (a fault, not the message's doing): it was not
	// delivered and may be sent again as it is.
	Unsent
)

func (o Outcome) String() string {
	switch o {
	case Acked:
		return "acked"
	case Returned:
		return "returned"
	case Nacked:
		return "nacked"
	case Failed:
		return "failed"
	case Unknown:
		return "unknown"
	case Unsent:
		return "unsent"
	}
	return fmt.Sprintf("outcome(%d)", uint8(o))
}

// Result is the outcome of one publish.
type Result struct {
	Outcome Outcome
	// Reason explains every outcome but Acked.
	Reason string
}

// ErrNoCorrelation is returned by Publish for a message without the
// correlation header.
var ErrNoCorrelation = errors.New("broker: message lacks its correlation header")

// ErrNoChannel is returned (wrapped, with the cause) by Publish when it
// could not open a channel to publish on: the connection's channel_max is
// reached, or the connection went down while the channel was being opened
// or put in confirm mode. The message was not sent; it may be published
// again as it is once a channel can be opened. (A Conn closed for good is
// ErrClosed instead: no channel will open on it.)
var ErrNoChannel = errors.New("broker: no channel to publish on")

// Publisher publishes with publisher confirms and the mandatory flag on one
// channel of the shared Conn, and tells each caller what became of its
// message: only a confirm that was not preceded by a return means the
// message was routed. It is safe for concurrent use, but publishes go out
// one at a time in call order.
//
// The channel is opened on first use and opened again after it dies; every
// publish in flight on a dead channel ends Unknown, since the broker may
// have routed it before the channel went down. Publish waits while the
// connection is blocked by a memory or disk alarm, so nothing is sent that
// the broker would only hold on the socket.
type Publisher struct {
	cfg   PublisherConfig
	log   *slog.Logger
	slots chan struct{} // one per publish awaiting its outcome

	pubMu sync.Mutex // serialises publishes: delivery tags follow call order

	mu  sync.Mutex
	cur *pubChannel
	// retired are channels that take no new publish (a nack came on
	// them) and close once their last publish has its outcome.
	retired map[*pubChannel]bool
	closed  bool
	idle    *sync.Cond // signalled when a publish ends
	active  int
}

type pubChannel struct {
	ch       *amqp.Channel
	confirms chan amqp.Confirmation
	returns  chan amqp.Return
	closes   chan *amqp.Error
	nextTag  uint64
	pending  map[uint64]*publish
	byCorr   map[string]*publish
	dead     bool
	retired  bool          // a nack came: no new publish goes here
	timedOut bool          // closed by checkTimeouts
	cause    string        // why it died, set by onDead before done closes
	done     chan struct{} // closed when its watcher returned
}

type publish struct {
	tag      uint64
	exchange string
	corr     string
	returned *amqp.Return
	done     func(Result)
	sentAt   time.Time
	blocked  time.Duration // time spent blocked since sentAt, not held against the timeout
}

// NewPublisher validates cfg. It opens no channel until the first publish.
func NewPublisher(cfg PublisherConfig) (*Publisher, error) {
	if cfg.Conn == nil {
		return nil, errors.New("broker: publisher: Conn is required")
	}
	if cfg.Window < 0 {
		return nil, fmt.Errorf("broker: publisher: Window must be >= 0, got %d", cfg.Window)
	}
	cfg.Window = cmp.Or(cfg.Window, 1000)
	cfg.CorrelationHeader = cmp.Or(cfg.CorrelationHeader, HeaderReplayID)
	cfg.ConfirmTimeout = cmp.Or(cfg.ConfirmTimeout, 2*time.Minute)
	p := &Publisher{
		cfg:     cfg,
		log:     cmp.Or(cfg.Logger, slog.Default()).With("component", "publisher"),
		slots:   make(chan struct{}, cfg.Window),
		retired: map[*pubChannel]bool{},
	}
	p.idle = sync.NewCond(&p.mu)
	return p, nil
}

// Publish sends msg to exchange with routing key key, mandatory, and
// arranges for done to be called exactly once with its outcome. done is
// called from the publisher's own goroutine (or from Publish itself for a
// message that could not be sent); it must return quickly and never block,
// because confirms wait for it.
//
// Publish blocks while the window is full and while the connection is
// blocked by an alarm. It returns an error, without calling done, only
// when the message was not sent: ctx ended before it was handed to the
// broker, no channel could be opened (ErrNoChannel), the publisher is
// closed, or msg has no correlation header (or one already in flight).
func (p *Publisher) Publish(ctx context.Context, exchange, key string, msg amqp.Publishing, done func(Result)) error {
	corr, _ := msg.Headers[p.cfg.CorrelationHeader].(string)
	if corr == "" {
		return fmt.Errorf("%w %s", ErrNoCorrelation, p.cfg.CorrelationHeader)
	}
	if err := p.takeSlot(ctx); err != nil {
		return err
	}
	sent := false
	defer func() {
		if !sent {
			p.finished()
		}
	}()

	p.pubMu.Lock()
	defer p.pubMu.Unlock()
	if err := p.waitUnblocked(ctx); err != nil {
		return err
	}
	pb := &publish{exchange: exchange, corr: corr, done: done}
	pc, died, err := p.register(ctx, pb)
	if err != nil {
		return err
	}
	sent = true
	if died != "" {
		// Died between opening and now: it never left.
		p.deliver(pb, Result{Outcome: Unsent, Reason: "not sent: " + died})
		return nil
	}
	p.send(pc, pb, key, msg)
	return nil
}

// takeSlot waits for room in the window (or for ctx to end), and counts
// the publish as active: from then on it must end in finished, once.
func (p *Publisher) takeSlot(ctx context.Context) error {
	select {
	case p.slots <- struct{}{}:
	case <-ctx.Done():
		return context.Cause(ctx)
	}
	p.mu.Lock()
	p.active++
	p.mu.Unlock()
	return nil
}

// register puts pb on the live channel under the delivery tag its send
// will take, and stamps its sentAt. It is registered before it is sent:
// its confirm cannot come earlier, and the watcher then always finds it.
// When the channel died before pb could be sent, register leaves pb off
// it and returns why (died); pb never left. p.pubMu must be held.
func (p *Publisher) register(ctx context.Context, pb *publish) (pc *pubChannel, died string, err error) {
	for {
		if pc, err = p.channel(ctx); err != nil {
			return nil, "", err
		}
		p.mu.Lock()
		if !pc.retired {
			break
		}
		p.mu.Unlock() // retired since channel() looked: take another
	}
	pb.sentAt = time.Now()
	if pc.dead {
		died = cmp.Or(pc.cause, "channel closed before the message was sent")
		p.mu.Unlock()
		return pc, died, nil
	}
	if _, dup := pc.byCorr[pb.corr]; dup {
		p.mu.Unlock()
		return nil, "", fmt.Errorf("broker: publish: %s %q is already in flight", p.cfg.CorrelationHeader, pb.corr)
	}
	pc.nextTag++
	pb.tag = pc.nextTag
	pc.pending[pb.tag] = pb
	pc.byCorr[pb.corr] = pb
	p.mu.Unlock()
	return pc, "", nil
}

// send hands msg, registered as pb on pc, to the broker. A send that
// fails ends pb at once (unless the watcher ended it first, as the
// channel died): Unsent when the channel was closed under it, Unknown
// when the write may have reached the broker. p.pubMu must still be held
// from register: the library gives delivery tags in send order.
func (p *Publisher) send(pc *pubChannel, pb *publish, key string, msg amqp.Publishing) {
	dc, err := pc.ch.PublishWithDeferredConfirm(pb.exchange, key, true, false, msg)
	if err != nil {
		p.mu.Lock()
		// A failed send is taken back by the library: the next publish
		// reuses this tag.
		pc.nextTag--
		_, still := pc.pending[pb.tag]
		delete(pc.pending, pb.tag)
		delete(pc.byCorr, pb.corr)
		p.mu.Unlock()
		if still {
			res := Result{Outcome: Unsent, Reason: "not sent: " + p.closedReason(pc, err)}
			if !errors.Is(err, amqp.ErrClosed) {
				// A write that failed part way may have reached the broker
				// whole before the error surfaced.
				res = Result{Outcome: Unknown, Reason: "outcome unknown: the write failed part way (" + err.Error() + "); it may have been delivered"}
			}
			p.deliver(pb, res)
		}
		return
	}
	if dc != nil && dc.DeliveryTag != pb.tag {
		// Cannot happen while this publisher is the channel's only user; if
		// it did, outcomes could be attributed to the wrong messages, so
		// the channel is abandoned and everything on it ends Unknown.
		p.log.Error("delivery tags out of step; closing the channel", "expected", pb.tag, "got", dc.DeliveryTag)
		_ = pc.ch.Close()
	}
}

// closedReason says why a send failed: for a channel that was closed
// under it (a refusal such as 403 ACCESS_REFUSED on an earlier publish, a
// timeout), the cause the watcher saw rather than the library's bare
// "channel/connection is not open".
func (p *Publisher) closedReason(pc *pubChannel, err error) string {
	if !errors.Is(err, amqp.ErrClosed) {
		return err.Error()
	}
	select {
	case <-pc.done: // the library closes the notifications as it shuts the channel
	case <-time.After(5 * time.Second):
		return err.Error()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return cmp.Or(pc.cause, err.Error())
}

// waitUnblocked waits while RabbitMQ blocks publishing on the connection.
func (p *Publisher) waitUnblocked(ctx context.Context) error {
	if !p.cfg.Conn.Blocked() {
		return nil
	}
	p.log.Warn("RabbitMQ blocks publishing (resource alarm); waiting")
	t := time.NewTicker(100 * time.Millisecond)
	defer t.Stop()
	for p.cfg.Conn.Blocked() {
		select {
		case <-ctx.Done():
			return context.Cause(ctx)
		case <-t.C:
		}
	}
	p.log.Info("RabbitMQ accepts publishing again")
	return nil
}

// channel returns the live channel, opening one if needed.
func (p *Publisher) channel(ctx context.Context) (*pubChannel, error) {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return nil, errors.New("broker: publisher closed")
	}
	pc := p.cur
	live := pc != nil && !pc.dead && !pc.retired // written by the watcher, under mu
	p.mu.Unlock()
	if live {
		return pc, nil
	}
	ch, err := p.cfg.Conn.Channel(ctx)
	if err != nil {
		if ctx.Err() != nil || errors.Is(err, ErrClosed) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrNoChannel, err)
	}
	if err := ch.Confirm(false); err != nil {
		_ = ch.Close()
		return nil, fmt.Errorf("%w: put channel in confirm mode: %w", ErrNoChannel, err)
	}
	pc = &pubChannel{
		ch: ch,
		// Buffered beyond the window and always drained: the library drops
		// a notification it cannot hand over within a few seconds.
		confirms: ch.NotifyPublish(make(chan amqp.Confirmation, p.cfg.Window+16)),
		returns:  ch.NotifyReturn(make(chan amqp.Return, p.cfg.Window+16)),
		closes:   ch.NotifyClose(make(chan *amqp.Error, 1)),
		pending:  make(map[uint64]*publish),
		byCorr:   make(map[string]*publish),
		done:     make(chan struct{}),
	}
	p.mu.Lock()
	p.cur = pc
	p.mu.Unlock()
	go p.watch(pc)
	return pc, nil
}

// InFlight is how many publishes await their outcome.
func (p *Publisher) InFlight() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active
}

// Wait returns when no publish awaits its outcome, or when ctx ends.
func (p *Publisher) Wait(ctx context.Context) error {
	stop := context.AfterFunc(ctx, func() {
		p.mu.Lock()
		p.idle.Broadcast()
		p.mu.Unlock()
	})
	defer stop()
	p.mu.Lock()
	defer p.mu.Unlock()
	for p.active > 0 {
		if ctx.Err() != nil {
			return context.Cause(ctx)
		}
		p.idle.Wait()
	}
	return nil
}

// Close waits for the publishes in flight (until ctx ends), then closes the
// channel: whatever is still unconfirmed ends Unknown. It is idempotent.
func (p *Publisher) Close(ctx context.Context) error {
	werr := p.Wait(ctx)
	p.pubMu.Lock()
	defer p.pubMu.Unlock()
	p.mu.Lock()
	p.closed = true
	open := make([]*pubChannel, 0, 1+len(p.retired))
	if p.cur != nil {
		open = append(open, p.cur)
	}
	for pc := range p.retired {
		open = append(open, pc)
	}
	p.cur = nil
	p.mu.Unlock()
	for _, pc := range open {
		_ = pc.ch.Close()
		<-pc.done
	}
	return werr
}
