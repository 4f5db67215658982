package bench

import (
	"context"
	crand "crypto/rand"
	"errors"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
)

// declareDLQ declares a run's dead-letter exchange and dlq's own queue on
// it, as dlq declares them: a topic exchange and a queue bound with "#",
// the queue with args (broker.OwnQueueArgs unless a run measures another
// queue type).
func declareDLQ(ch *amqp.Channel, exchange, queue string, args amqp.Table) error {
	if err := ch.ExchangeDeclare(exchange, "topic", true, false, false, false, nil); err != nil {
		return err
	}
	if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
		return err
	}
	return ch.QueueBind(queue, "#", exchange, false, nil)
}

// dialDLQ connects to RabbitMQ and declares a run's dead-letter exchange
// and dlq's own queue on it (declareDLQ): with broker.OwnQueueArgs for the
// broker's version, as dlq serve declares it, or a classic queue when a
// run measures that type. It returns the connection, which the caller
// closes, and the channel it declared them on.
func dialDLQ(amqpURL, exchange, queue, queueType string) (*amqp.Connection, *amqp.Channel, error) {
	conn, err := amqp.Dial(amqpURL)
	if err != nil {
		return nil, nil, fmt.Errorf("connect to RabbitMQ: %w", err)
	}
	ch, err := conn.Channel()
	if err != nil {
		_ = conn.Close()
		return nil, nil, err
	}
	version, _ := conn.Properties["version"].(string)
	args := broker.OwnQueueArgs(version)
	if queueType == "classic" {
		args = amqp.Table{"x-queue-type": "classic"}
	}
	if err := declareDLQ(ch, exchange, queue, args); err != nil {
		_ = conn.Close()
		return nil, nil, fmt.Errorf("declare exchange %s and queue %s: %w", exchange, queue, err)
	}
	return conn, ch, nil
}

// rejectAll consumes queue on a channel of its own and rejects every
// message without requeueing, which makes RabbitMQ dead-letter it. stop
// cancels the consumer.
func rejectAll(conn *amqp.Connection, queue string) (stop func() error, err error) {
	ch, err := conn.Channel()
	if err != nil {
		return nil, err
	}
	if err := ch.Qos(2000, 0, false); err != nil {
		return nil, err
	}
	ds, err := ch.Consume(queue, "bench-rejecter", false, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume source queue %s: %w", queue, err)
	}
	done := make(chan error, 1)
	go func() {
		// One multiple-reject per 500 deliveries (or after 20ms without
		// more) keeps the rejecter from being the prefill's bottleneck.
		var last *amqp.Delivery
		held := 0
		flush := func() error {
			if last == nil {
				return nil
			}
			err := last.Nack(true, false)
			last, held = nil, 0
			return err
		}
		idle := time.NewTicker(20 * time.Millisecond)
		defer idle.Stop()
		for {
			select {
			case d, ok := <-ds:
				if !ok {
					done <- flush()
					return
				}
				last = &d
				if held++; held < 500 {
					continue
				}
			case <-idle.C:
			}
			if err := flush(); err != nil {
				done <- fmt.Errorf("reject: %w", err)
				return
			}
		}
	}()
	return func() error {
		defer ch.Close()
		if err := ch.Cancel("bench-rejecter", false); err != nil {
			return err
		}
		return <-done
	}, nil
}

// prefill publishes n messages with publisher confirms and typical
// application headers: straight to dlq's exchange as dead letters, with the
// headers RabbitMQ writes when it dead-letters (two x-death entries, as
// after a retry queue, and x-first-death-*) when withDeath, else to a
// source queue where RabbitMQ dead-letters them.
func prefill(ctx context.Context, conn *amqp.Connection, exchange, key string, withDeath bool, n, size int, runID string) error {
	return prefillQueues(ctx, conn, exchange, key, withDeath, n, size, runID, 1, false)
}

// prefillQueues is prefill with the death record naming one of queues
// source queues in turn (orders.process.0, .1, ...; orders.process when
// queues is 1), so that a benchmark can replay them as separate tasks.
func prefillQueues(ctx context.Context, conn *amqp.Connection, exchange, key string, withDeath bool, n, size int, runID string, queues int, text bool) error {
	bodies := randomBodies(size)
	for i := range bodies {
		if !text {
			break
		}
		// Words, as a text body's (text search tokenises them).
		r := rand.New(rand.NewPCG(uint64(i), 3))
		b := bodies[i][:0]
		for len(b) < size {
			b = append(b, benchWords[int(r.ExpFloat64()*20)%len(benchWords)]...)
			b = append(b, ' ')
		}
		bodies[i] = b[:size]
	}
	now := time.Now().UTC().Truncate(time.Second)
	return publishConfirmed(ctx, conn, exchange, key, n, func(i int) amqp.Publishing {
		id := fmt.Sprintf("bench-%s-%08d", runID, i)
		body := bodies[i%len(bodies)]
		if text && i == n-1 {
			// The newest message carries a word no other body has: the
			// drain's search check (searchNewest) looks for it.
			body = append([]byte(newestNeedle(runID)+" "), body...)[:len(body)]
		}
		h := amqp.Table{
			"x-correlation-id":    id,
			"x-tenant":            "acme-" + strconv.Itoa(i%50),
			"x-retry-count":       int32(3),
			"x-exception-type":    "OrderValidationError",
			"x-exception-message": "order total does not match its lines",
			"traceparent":         "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
		}
		if withDeath {
			source := "orders.process"
			if queues > 1 {
				source += "." + strconv.Itoa(i%queues)
			}
			h["x-death"] = []any{
				amqp.Table{"count": int64(3), "reason": "rejected", "queue": source, "time": now,
					"exchange": "orders", "routing-keys": []any{"orders.created"}},
				amqp.Table{"count": int64(2), "reason": "expired", "queue": "orders.retry", "time": now.Add(-time.Minute),
					"exchange": "orders.retry", "routing-keys": []any{"orders.created"}, "original-expiration": "10000"},
			}
			h["x-first-death-reason"] = "expired"
			h["x-first-death-queue"] = "orders.retry"
			h["x-first-death-exchange"] = "orders.retry"
		}
		return amqp.Publishing{
			ContentType: "application/json", DeliveryMode: amqp.Persistent, MessageId: id, CorrelationId: id,
			Timestamp: now, AppId: "orders-service", Type: "order.created", Headers: h, Body: body,
		}
	})
}

// prefillLimitsShape publishes n dead letters shaped as bench-limits'
// pipeline publishes its own (its dlqPublishing in ../shared/bench-limits):
// one x-death entry naming one of twenty source queues in turn, the three
// x-first-death headers and an x-error, a binary body, and of the
// properties only persistence, content type, message id and timestamp. The
// raw pipeline's ratio is then taken over the same bytes on both sides
// (docs/BENCHMARKS.md, How each benchmark measures).
func prefillLimitsShape(ctx context.Context, conn *amqp.Connection, exchange, key string, n, size int) error {
	bodies := randomBodies(size)
	now := time.Now()
	return publishConfirmed(ctx, conn, exchange, key, n, func(i int) amqp.Publishing {
		source := fmt.Sprintf("svc-%02d", i%20)
		return amqp.Publishing{
			DeliveryMode: amqp.Persistent,
			ContentType:  "application/octet-stream",
			MessageId:    fmt.Sprintf("m-%d-%d", now.UnixNano(), i),
			Timestamp:    now,
			Headers: amqp.Table{
				"x-death": []any{amqp.Table{
					"count": int64(1), "exchange": "orders", "queue": source, "reason": "rejected",
					"routing-keys": []any{"orders.created"}, "time": now,
				}},
				"x-first-death-exchange": "orders",
				"x-first-death-queue":    source,
				"x-first-death-reason":   "rejected",
				"x-error":                "handler: context deadline exceeded",
			},
			Body: bodies[i%len(bodies)],
		}
	})
}

// randomBodies returns the 1,024 bodies of size random bytes that a
// prefill's messages take in turn.
func randomBodies(size int) [][]byte {
	bodies := make([][]byte, 1024)
	for i := range bodies {
		bodies[i] = make([]byte, size)
		_, _ = crand.Read(bodies[i])
	}
	return bodies
}

// publishConfirmed publishes message(0) .. message(n-1) on a channel of
// its own with up to 2,000 confirms outstanding and fails on the first
// nack.
func publishConfirmed(ctx context.Context, conn *amqp.Connection, exchange, key string, n int, message func(i int) amqp.Publishing) error {
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	defer ch.Close()
	if err := ch.Confirm(false); err != nil {
		return err
	}
	const window = 2000
	pending := make([]*amqp.DeferredConfirmation, 0, window)
	settle := func() error {
		for _, dc := range pending {
			ok, err := dc.WaitContext(ctx)
			if err != nil {
				return err
			}
			if !ok {
				return errors.New("publish nacked")
			}
		}
		pending = pending[:0]
		return nil
	}
	for i := 0; i < n; i++ {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, key, false, false, message(i))
		if err != nil {
			return err
		}
		pending = append(pending, dc)
		if len(pending) == window {
			if err := settle(); err != nil {
				return err
			}
		}
	}
	return settle()
}

func passive(conn *amqp.Connection, queue string) (amqp.Queue, error) {
	ch, err := conn.Channel()
	if err != nil {
		return amqp.Queue{}, err
	}
	defer ch.Close()
	return ch.QueueDeclarePassive(queue, true, false, false, false, nil)
}

func waitReady(conn *amqp.Connection, queue string, n int, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		q, err := passive(conn, queue)
		if err != nil {
			return err
		}
		if q.Messages >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("queue %s holds %d of %d after %s", queue, q.Messages, n, timeout)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// newestNeedle is the word only the newest message of a text prefill has
// in its body (a letter run: text search tokenises it as one word).
func newestNeedle(runID string) string {
	b := []byte("newestneedle")
	for _, c := range runID {
		if c >= '0' && c <= '9' {
			c = 'a' + (c - '0')
		}
		if c >= 'a' && c <= 'z' {
			b = append(b, byte(c))
		}
	}
	return string(b)
}
