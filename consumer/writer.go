package consumer

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// writer commits a session's batches in order and acknowledges them.
type writer struct {
	w    *worker
	ch   *amqp.Channel
	dead <-chan struct{}
	// confirmed are batches whose acks the broker has processed, with when.
	// They leave ingest_inflight with a write (or after a second without
	// one) once confirmDelay has passed: the channel handled their acks, but
	// a quorum queue may not have applied them yet, and a channel that
	// closes (a crash, a lost connection) drops settlements it still holds
	// back (settle.go), so RabbitMQ may deliver them again. Those still here
	// when the session ends stay in ingest_inflight.
	confirmed []confirmedBatch
	acking    bool
	// rpc serialises synchronous methods on ch with the session's.
	rpc *sync.Mutex
}

// run writes the batches from ready until it closes, and gives each back
// on spare once done with it (when spare has room).
func (wr *writer) run(ready <-chan *pending, spare chan<- *pending, stop <-chan struct{}) {
	wr.acking = true
	idle := time.NewTimer(time.Second)
	defer idle.Stop()
	for {
		select {
		case p, ok := <-ready:
			if !ok {
				return
			}
			wr.handle(p, stop)
			// Nothing holds the batch's messages now: drop them for the
			// collector and keep the slice.
			clear(p.batch.Messages)
			p.batch.Messages, p.lastTag, p.bytes = p.batch.Messages[:0], 0, 0
			select {
			case spare <- p:
			default:
			}
		case <-idle.C:
			wr.flushConfirmed()
		}
		idle.Reset(time.Second)
	}
}

// confirmDelay is how long after its ack a batch stays in ingest_inflight:
// far longer than a quorum queue holds a settlement back (tens to hundreds
// of milliseconds measured on a loaded machine), short enough that
// redeliveries are matched against few batches.
const confirmDelay = 5 * time.Second

type confirmedBatch struct {
	id    int64
	acked time.Time
}

// due returns the confirmed batches acked at least confirmDelay ago (the
// oldest come first).
func (wr *writer) due() []int64 {
	var ids []int64
	for _, b := range wr.confirmed {
		if time.Since(b.acked) < confirmDelay {
			break
		}
		ids = append(ids, b.id)
	}
	return ids
}

// forget drops the first n confirmed batches (they left ingest_inflight).
func (wr *writer) forget(n int) {
	wr.confirmed = append(wr.confirmed[:0], wr.confirmed[n:]...)
}

func (wr *writer) flushConfirmed() {
	ids := wr.due()
	if len(ids) == 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := wr.w.c.cfg.Store.ConfirmBatches(ctx, ids); err == nil {
		wr.forget(len(ids))
	}
}

func (wr *writer) gone(stop <-chan struct{}) bool {
	select {
	case <-wr.dead:
		return true
	case <-stop:
		return true
	default:
		return false
	}
}

// handle writes p (retrying until it commits, the channel dies or stop
// closes) and acknowledges it.
func (wr *writer) handle(p *pending, stop <-chan struct{}) {
	c := wr.w.c
	log := c.log.With("queue", wr.w.queue, "consumer_tag", wr.w.tag)
	committed, complete := wr.write(p, stop, log)
	if !complete || !wr.acking || wr.gone(nil) {
		// Whatever committed is redelivered and recognised as stored.
		return
	}
	// Multiple-ack the highest tag: the batch holds every delivery since the
	// previous batch's last tag, and batches are acknowledged in order.
	if err := wr.ch.Ack(p.lastTag, true); err != nil {
		wr.acking = false
		log.Warn("acknowledgement failed; the broker will redeliver and the store will recognise the messages", "batch_id", p.batch.ID, "error", err)
		return
	}
	// A synchronous round trip on the same channel proves the ack was
	// handled (see the package doc); then the batches can leave
	// ingest_inflight.
	wr.rpc.Lock()
	err := wr.ch.Qos(c.cfg.Prefetch, 0, false)
	wr.rpc.Unlock()
	if err != nil {
		wr.acking = false
		return
	}
	now := time.Now()
	for _, id := range committed {
		wr.confirmed = append(wr.confirmed, confirmedBatch{id, now})
	}
}

// write commits p, splitting it when PostgreSQL refuses its data. It
// returns the ids of the committed batches (empty when it gave up).
func (wr *writer) write(p *pending, stop <-chan struct{}, log *slog.Logger) (ids []int64, complete bool) {
	ctx, cancel := wr.attemptContext()
	defer cancel()
	q := writeQueue{msgs: [][]store.NewMessage{p.batch.Messages}, ids: []int64{p.batch.ID}}
	r := writeRetry{wr: wr, log: log, stop: stop, backoff: 100 * time.Millisecond}
	var done []int64
	for len(q.msgs) > 0 {
		if wr.gone(nil) {
			return done, false
		}
		var out attemptOutcome
		q, out = r.attempt(ctx, q)
		switch out {
		case attemptGaveUp:
			return done, false
		case attemptStored:
			done = append(done, q.ids[0])
			q.msgs, q.ids = q.msgs[1:], q.ids[1:]
		}
	}
	return done, true
}

// attemptContext is the context of a write's attempts, cancelled when the
// channel dies. A write for a dead channel is pointless and harmful: its
// deliveries are already on their way to another consumer, which must
// find either this batch committed or nothing at all. So the write stops
// before each attempt, and cancels an attempt in progress, once the
// channel is gone.
func (wr *writer) attemptContext() (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		select {
		case <-wr.dead:
			cancel()
		case <-ctx.Done():
		}
	}()
	return ctx, cancel
}

// writeQueue is what a write still has to commit, in order: the pending
// batch, or the parts PostgreSQL's refusals replaced it with, each with its
// id. It is passed and returned by value, never stored behind a pointer, so
// that its first arrays can stay on the write's stack.
type writeQueue struct {
	msgs [][]store.NewMessage
	ids  []int64
}

// writeRetry is the state a write keeps across its attempts.
type writeRetry struct {
	wr   *writer
	log  *slog.Logger
	stop <-chan struct{}
	// backoff is the wait before the next attempt after a failure; failing
	// is set once the failure was logged.
	backoff time.Duration
	failing bool
	// unsure is set when an attempt failed in a way that may have
	// committed it, with the number of confirmed batches it carried. The
	// batch is written again only once the store answers that it did not
	// commit (rule 4): written blindly, a batch that did commit (its
	// COMMIT's answer lost, the server restarted or failed over) would
	// meet its own id in ingest_inflight, and that refusal would be taken
	// for one of its messages' data.
	unsure    bool
	unsureDue int
}

// attemptOutcome is what an attempt at the head of a write's queue came to.
type attemptOutcome int

const (
	attemptRetry  attemptOutcome = iota // not committed: the head (perhaps reshaped) is tried again
	attemptStored                       // the head committed
	attemptGaveUp                       // the channel died or stop closed
	// attemptUncommitted is askCommitted's answer that the head did not
	// commit: it is written now.
	attemptUncommitted
)

// attempt tries once to commit the head of q, and returns q with the head
// reshaped when PostgreSQL refused its data.
func (r *writeRetry) attempt(ctx context.Context, q writeQueue) (writeQueue, attemptOutcome) {
	c := r.wr.w.c
	msgs, id := q.msgs[0], q.ids[0]
	start := time.Now()
	if r.unsure {
		if out := r.askCommitted(ctx, msgs, id, start); out != attemptUncommitted {
			return q, out
		}
	}
	due := r.wr.due()
	b := store.IngestBatch{ID: id, Consumer: r.wr.w.tag, Messages: msgs, Confirmed: due}
	res, err := c.cfg.Store.IngestBatch(ctx, b)
	if err == nil {
		r.stored(id, msgs, res, start, len(due))
		return q, attemptStored
	}
	if store.IsDataError(err) {
		var reshaped bool
		if q, reshaped = r.reshape(q, err); reshaped {
			return q, attemptRetry
		}
		// Even the body alone was refused: this is not about the data.
	}
	if r.wr.gone(nil) {
		// We cancelled the attempt because the channel died: the error
		// says nothing about PostgreSQL, and the deliveries are already
		// going back to the queue. Recording it would leave the worker
		// unready until its next write, which may never come if others
		// take the redeliveries.
		return q, attemptGaveUp
	}
	// The commit may have succeeded before the error reached us: ask
	// at once, and back off only if it did not.
	rows, ok, cerr := c.cfg.Store.CommittedRows(ctx, id)
	if cerr == nil && ok {
		r.stored(id, msgs, reconstructResult(msgs, rows), start, len(due))
		return q, attemptStored
	}
	// Unanswered, the question is asked again before the next write.
	r.unsure, r.unsureDue = cerr != nil, len(due)
	return q, r.pause(id, len(msgs), err)
}

// askCommitted asks whether the head of the queue (msgs, id) committed in
// the attempt whose answer was lost. Unanswered, it pauses: the question
// is asked again before the next write.
func (r *writeRetry) askCommitted(ctx context.Context, msgs []store.NewMessage, id int64, start time.Time) attemptOutcome {
	rows, ok, err := r.wr.w.c.cfg.Store.CommittedRows(ctx, id)
	if err == nil && ok {
		r.stored(id, msgs, reconstructResult(msgs, rows), start, r.unsureDue)
		r.unsure = false
		return attemptStored
	}
	if r.wr.gone(nil) {
		return attemptGaveUp
	}
	if err != nil {
		return r.pause(id, len(msgs), err)
	}
	r.unsure = false
	return attemptUncommitted
}

// reshape replaces the head of q, whose data PostgreSQL refused with err:
// by its halves, or a single message by its next raw form. It returns
// false when the head was already the last raw form.
func (r *writeRetry) reshape(q writeQueue, err error) (writeQueue, bool) {
	r.wr.w.c.metrics.dataErrors.Inc()
	msgs := q.msgs[0]
	if len(msgs) > 1 {
		half := len(msgs) / 2
		q.msgs = append([][]store.NewMessage{msgs[:half], msgs[half:]}, q.msgs[1:]...)
		q.ids = append([]int64{store.NewBatchID(), store.NewBatchID()}, q.ids[1:]...)
		return q, true
	}
	if raw, ok := rawForm(msgs[0], err); ok {
		r.log.Error("PostgreSQL refused a dead message; storing it raw with the error", "batch_id", q.ids[0], "error", err, "conversion_error", raw.ConversionError)
		q.msgs[0] = []store.NewMessage{raw}
		q.ids[0] = store.NewBatchID()
		return q, true
	}
	return q, false
}

// stored records the commit of batch id (msgs) with res, which write then
// takes off its queue; a commit learnt afterwards (CommittedRows) proves
// PostgreSQL works as much as one answered at once, so either ends a
// failure the worker reported.
func (r *writeRetry) stored(id int64, msgs []store.NewMessage, res store.IngestResult, start time.Time, confirmed int) {
	w := r.wr.w
	w.c.metrics.observe(w.queue, msgs, res, time.Since(start))
	r.wr.forget(confirmed)
	if r.failing {
		r.log.Info("writing to PostgreSQL works again", "batch_id", id)
		r.failing = false
	}
	w.setWriteErr(nil)
}

// pause records a failure of batch id (n messages) and waits before the
// next attempt; it gives up when the channel died or stop closed meanwhile.
func (r *writeRetry) pause(id int64, n int, err error) attemptOutcome {
	r.wr.w.c.metrics.writeErrors.Inc()
	r.wr.w.setWriteErr(err)
	if !r.failing {
		r.log.Warn("cannot write batch to PostgreSQL; holding it unacknowledged and retrying", "batch_id", id, "messages", n, "error", err)
		r.failing = true
	}
	select {
	case <-r.wr.dead:
		return attemptGaveUp
	case <-r.stop:
		return attemptGaveUp
	case <-time.After(r.backoff):
	}
	r.backoff = min(r.backoff*2, 5*time.Second)
	return attemptRetry
}

// Raw forms of a message PostgreSQL refused, tried in turn. The first
// keeps everything but the parsed failure details, with every text column
// cut to 255 bytes (the longest queue name, exchange, routing key or
// message id AMQP can carry: anything longer was written by hand into the
// headers, which keep it whole); the second keeps only the body, the ids
// and the time. Each records the refusal in conversion_error.
const (
	rawPrefix        = "stored raw: "
	rawMinimalPrefix = "stored raw (body only): "
)

// rawForm returns the next raw form of m, refused for cause, or false when
// m is already in the last one.
func rawForm(m store.NewMessage, cause error) (store.NewMessage, bool) {
	r := store.NewMessage{
		MessageID:        broker.ShortStr(m.MessageID),
		SourceQueue:      broker.ShortStr(m.SourceQueue),
		SourceExchange:   broker.ShortStr(m.SourceExchange),
		SourceRoutingKey: broker.ShortStr(m.SourceRoutingKey),
		DeadLetterQueue:  broker.ShortStr(m.DeadLetterQueue),
		Reason:           broker.ShortStr(m.Reason),
		DeathCount:       m.DeathCount,
		Properties:       m.Properties,
		Headers:          m.Headers,
		XDeath:           m.XDeath,
		Body:             m.Body,
		FirstFailedAt:    m.FirstFailedAt,
		FailedAt:         m.FailedAt,
		Fingerprint:      m.Fingerprint,
		Redelivered:      m.Redelivered,
		Returns:          m.Returns,
	}
	switch {
	case strings.HasPrefix(m.ConversionError, rawMinimalPrefix):
		return m, false
	case strings.HasPrefix(m.ConversionError, rawPrefix):
		r.MessageID, r.SourceQueue, r.SourceExchange, r.SourceRoutingKey, r.Reason = "", "", "", "", "unknown"
		r.Properties, r.Headers, r.XDeath = []byte(`{}`), []byte(`{}`), []byte(noDeaths)
		r.ConversionError = fmt.Sprintf("%sPostgreSQL refused the message and its raw form (%v); only the body, the dead-letter queue and the times are kept: %s",
			rawMinimalPrefix, cause, strings.TrimPrefix(m.ConversionError, rawPrefix))
	default:
		prev := ""
		if m.ConversionError != "" {
			prev = "; " + m.ConversionError
		}
		r.ConversionError = fmt.Sprintf("%sPostgreSQL refused the converted message (%v); kept: body, properties and headers; dropped: failure details%s",
			rawPrefix, cause, prev)
	}
	return r, true
}
