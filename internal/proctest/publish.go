package proctest

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

// Route is how a test message becomes a dead letter.
type Route int

const (
	// ViaTTL: published to a classic source queue with a message TTL of 0;
	// RabbitMQ expires and dead-letters it on arrival.
	ViaTTL Route = iota
	// ViaReject: published to a quorum source queue; the test's rejecter
	// rejects it without requeue.
	ViaReject
	// ViaDirect: published straight to the dead-letter exchange with the
	// headers RabbitMQ would have written. Confirmed by dlq's quorum queue
	// itself, so it stays exact across broker restarts.
	ViaDirect
)

// Ledger records which ids the broker confirmed and which publishes are
// indeterminate (the channel died before a confirm, or a nack).
type Ledger struct {
	mu            sync.Mutex
	confirmed     map[string]bool
	indeterminate map[string]bool
	nacks         int
}

// NewLedger returns an empty ledger.
func NewLedger() *Ledger {
	return &Ledger{confirmed: map[string]bool{}, indeterminate: map[string]bool{}}
}

// Counts returns how many publishes were confirmed and how many are
// indeterminate.
func (l *Ledger) Counts() (confirmed, indeterminate int) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.confirmed), len(l.indeterminate)
}

// Publisher dead-letters N uniquely identified messages, reconnecting
// whenever its connection dies, to the next of URLs. It never republishes
// an id: a publish whose fate is unknown stays indeterminate.
type Publisher struct {
	// URLs are the broker's nodes, dialled in turn. Required.
	URLs []string
	// Exchange is dlq's dead-letter exchange; TTLQueue and RejectQueue the
	// source queues of ViaTTL and ViaReject.
	Exchange, TTLQueue, RejectQueue string
	// N messages, cycling through Routes.
	N      int
	Routes []Route
	// Rate is messages per second overall; 0 is as fast as confirms allow.
	Rate int
	// Window is publishes awaiting their confirms; Size the body size.
	Window, Size int
	// Prefix starts every id; unique per publisher of a test.
	Prefix string
	// Twins makes every message identical (twin), for the redelivery
	// matching's worst case: fingerprints shared by many rows.
	Twins     bool
	TwinDeath time.Time
	// Ledger receives every publish's outcome. Required.
	Ledger *Ledger

	// confirmed and indeterminate count this publisher's own publishes.
	confirmed, indeterminate int

	done chan struct{}
	err  error
}

// Start starts publishing until N are published or ctx ends.
func (p *Publisher) Start(ctx context.Context) *Publisher {
	p.Window = max(p.Window, 1)
	p.done = make(chan struct{})
	go func() {
		defer close(p.done)
		p.err = p.run(ctx)
	}()
	return p
}

// Done is closed once the publisher has finished.
func (p *Publisher) Done() <-chan struct{} { return p.done }

// Wait waits up to timeout for the publisher to finish.
func (p *Publisher) Wait(t testing.TB, timeout time.Duration) {
	t.Helper()
	select {
	case <-p.done:
	case <-time.After(timeout):
		t.Fatalf("publisher still running after %s", timeout)
	}
	require.NoError(t, p.err)
	p.Ledger.mu.Lock()
	defer p.Ledger.mu.Unlock()
	t.Logf("published %d (%s): confirmed %d, indeterminate %d", p.N, p.Prefix, p.confirmed, p.indeterminate)
}

// ID is the id of message i.
func (p *Publisher) ID(i int) string { return fmt.Sprintf("%s-%07d", p.Prefix, i) }

// message builds dead letter i: its id leads the body, and most carry it as
// message-id too; one in ten has no message-id and is known by its body.
func (p *Publisher) message(i int) (exchange, key string, m amqp.Publishing) {
	if p.Twins {
		return p.Exchange, "orders.created", amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/json",
			Body:         []byte(`{"order":"same","amount":1}`),
			Headers: amqp.Table{
				"x-death": []any{amqp.Table{
					"count": int64(1), "reason": "rejected", "queue": "orders.work",
					"exchange": "orders", "routing-keys": []any{"orders.created"}, "time": p.TwinDeath,
				}},
				"x-first-death-reason": "rejected", "x-first-death-queue": "orders.work", "x-first-death-exchange": "orders",
			},
		}
	}
	id := p.ID(i)
	body := make([]byte, 0, p.Size)
	body = append(body, id...)
	body = append(body, '|')
	for len(body) < p.Size {
		body = append(body, byte('a'+(i+len(body))%26))
	}
	m = amqp.Publishing{
		DeliveryMode: amqp.Persistent,
		ContentType:  "application/octet-stream",
		Body:         body,
		Headers:      amqp.Table{"x-test-seq": int64(i), "tenant": "acme", "attempt": int32(i % 5)},
	}
	if i%10 != 3 {
		m.MessageId = id
	}
	switch p.Routes[i%len(p.Routes)] {
	case ViaTTL:
		return "", p.TTLQueue, m
	case ViaReject:
		return "", p.RejectQueue, m
	default:
		now := time.Now().UTC().Truncate(time.Second)
		m.Headers["x-death"] = []any{amqp.Table{
			"count": int64(1 + i%3), "reason": "rejected", "queue": "orders.work",
			"exchange": "orders", "routing-keys": []any{"orders.created"}, "time": now,
		}}
		m.Headers["x-first-death-reason"] = "rejected"
		m.Headers["x-first-death-queue"] = "orders.work"
		m.Headers["x-first-death-exchange"] = "orders"
		m.Headers["x-exception-message"] = "order " + id + " failed validation"
		return p.Exchange, "orders.created", m
	}
}

func (p *Publisher) run(ctx context.Context) error {
	start := time.Now()
	i, node := 0, 0
	backoff := 100 * time.Millisecond
	for i < p.N {
		if ctx.Err() != nil {
			return nil
		}
		conn, err := amqp.Dial(p.URLs[node%len(p.URLs)])
		node++
		if err != nil {
			time.Sleep(backoff)
			backoff = min(backoff*2, 2*time.Second)
			continue
		}
		backoff = 100 * time.Millisecond
		i = p.session(ctx, conn, i, start)
		_ = conn.Close()
	}
	return nil
}

// session publishes from message i on one connection until it dies or all
// are published; it returns the next message to publish.
func (p *Publisher) session(ctx context.Context, conn *amqp.Connection, i int, start time.Time) int {
	ch, err := conn.Channel()
	if err != nil {
		return i
	}
	if err := ch.Confirm(false); err != nil {
		return i
	}
	for i < p.N {
		k := min(p.Window, p.N-i)
		type inflight struct {
			id string
			dc *amqp.DeferredConfirmation
		}
		batch := make([]inflight, 0, k)
		broken := false
		for j := 0; j < k; j++ {
			if p.Rate > 0 {
				// Pace the publishes so dead letters keep arriving for
				// the whole test instead of in one burst.
				due := start.Add(time.Duration(i) * time.Second / time.Duration(p.Rate))
				if d := time.Until(due); d > 0 {
					time.Sleep(d)
				}
			}
			ex, key, m := p.message(i)
			id := p.ID(i)
			i++
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, ex, key, false, false, m)
			if err != nil {
				// It may or may not have left our socket.
				p.Ledger.mu.Lock()
				p.Ledger.indeterminate[id] = true
				p.indeterminate++
				p.Ledger.mu.Unlock()
				broken = true
				break
			}
			batch = append(batch, inflight{id, dc})
		}
		for _, f := range batch {
			ok, err := f.dc.WaitContext(ctx)
			p.Ledger.mu.Lock()
			if err == nil && ok {
				p.Ledger.confirmed[f.id] = true
				p.confirmed++
			} else {
				// Closed channel or nack: the message may still be routed.
				p.Ledger.indeterminate[f.id] = true
				p.indeterminate++
				if err == nil && !ch.IsClosed() {
					p.Ledger.nacks++
				}
				broken = broken || ch.IsClosed()
			}
			p.Ledger.mu.Unlock()
		}
		if broken || ctx.Err() != nil {
			return i
		}
	}
	return i
}

// Rejecter dead-letters everything in queue by rejecting it, reconnecting
// whenever its connection dies, until ctx ends.
func Rejecter(ctx context.Context, url, queue string) {
	go func() {
		for ctx.Err() == nil {
			conn, err := amqp.Dial(url)
			if err != nil {
				time.Sleep(200 * time.Millisecond)
				continue
			}
			func() {
				defer conn.Close()
				ch, err := conn.Channel()
				if err != nil {
					return
				}
				if err := ch.Qos(300, 0, false); err != nil {
					return
				}
				ds, err := ch.Consume(queue, "", false, false, false, false, nil)
				if err != nil {
					return
				}
				for {
					select {
					case <-ctx.Done():
						return
					case d, ok := <-ds:
						if !ok {
							return
						}
						_ = d.Reject(false)
					}
				}
			}()
			time.Sleep(100 * time.Millisecond)
		}
	}()
}

// DeleteTopology deletes queues, then exchanges, on conn, each on a
// channel of its own: a test's cleanup, which goes on past what is
// already gone (a refusal closes only that channel).
func DeleteTopology(conn *amqp.Connection, queues, exchanges []string) {
	for _, q := range queues {
		if ch, err := conn.Channel(); err == nil {
			_, _ = ch.QueueDelete(q, false, false, false)
			_ = ch.Close()
		}
	}
	for _, x := range exchanges {
		if ch, err := conn.Channel(); err == nil {
			_ = ch.ExchangeDelete(x, false, false)
			_ = ch.Close()
		}
	}
}
