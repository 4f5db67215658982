package broker

import (
	"context"
	"errors"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/internal/dlqtest"
)

func testConn(t *testing.T) *Conn {
	t.Helper()
	c, err := NewConn(ConnConfig{URL: dlqtest.AMQPURL(), Name: "dlq-test"})
	if err != nil {
		t.Fatalf("new conn: %v", err)
	}
	t.Cleanup(c.Close)
	return c
}

// A broker that does not answer the passive declare (a blocked connection,
// a silent link) must not hold the caller past its deadline; the look
// closes its channel once the broker call returns.
func TestExchangeLookReturnsAtItsDeadline(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	// The connection comes up first: on a loaded machine dialing alone can
	// take longer than the look's 200ms, and the look would then end before
	// the stand-in broker call ever ran.
	up, cancelUp := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelUp()
	if _, err := ExchangeExists(up, c, "amq.topic"); err != nil {
		t.Fatalf("connect: %v", err)
	}
	release := make(chan struct{})
	opened := make(chan *amqp.Channel, 1)
	look := exchangeLook{conn: c, declare: func(ch *amqp.Channel, name string) error {
		opened <- ch
		// Stands in for a broker that does not answer; the bound only
		// keeps a regression from hanging the test.
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return declarePassive(ch, name)
	}}
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := look.exists(ctx, "amq.topic")
	elapsed := time.Since(start)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("look with a broker not answering: got %v, want the deadline exceeded", err)
	}
	if elapsed > time.Second {
		t.Fatalf("look returned %v after it started, its deadline was 200ms", elapsed)
	}
	var ch *amqp.Channel
	select {
	case ch = <-opened:
	case <-time.After(10 * time.Second):
		t.Fatal("the look never opened its channel on a connection that is up")
	}
	if ch.IsClosed() {
		t.Fatal("channel closed while the broker call was still waiting")
	}
	close(release)
	deadline := time.Now().Add(5 * time.Second)
	for !ch.IsClosed() {
		if time.Now().After(deadline) {
			t.Fatal("the look's channel is still open after the broker call returned")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A context already ended answers at once, without waiting for the look.
func TestExchangeLookWithAnEndedContext(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	up, cancelUp := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancelUp()
	if _, err := ExchangeExists(up, c, "amq.topic"); err != nil {
		t.Fatalf("connect: %v", err)
	}
	release := make(chan struct{})
	defer close(release)
	look := exchangeLook{conn: c, declare: func(ch *amqp.Channel, name string) error {
		select {
		case <-release:
		case <-time.After(5 * time.Second):
		}
		return declarePassive(ch, name)
	}}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := look.exists(ctx, "amq.topic"); !errors.Is(err, context.Canceled) {
		t.Fatalf("look with an ended context: got %v, want canceled", err)
	}
}

// While RabbitMQ blocks the connection, a look for a waiting caller is
// not made: it could only end when the alarm clears.
func TestExchangeExistsNowSkipsABlockedConnection(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	exists, err := ExchangeExistsNow(ctx, c, "amq.topic")
	if err != nil || !exists {
		t.Fatalf("unblocked: got %v, %v; want true", exists, err)
	}
	c.setBlocked(true)
	if _, err := ExchangeExistsNow(ctx, c, "amq.topic"); !errors.Is(err, ErrBlocked) {
		t.Fatalf("blocked: got %v, want ErrBlocked", err)
	}
	if exists, err := ExchangeExistsNow(ctx, c, ""); err != nil || !exists {
		t.Fatalf("default exchange while blocked: got %v, %v; want true", exists, err)
	}
}

// A queue's look answers whether it exists (a replay through the default
// exchange reaches only the queue its routing key names), and is not made
// while RabbitMQ blocks the connection.
func TestQueueExistsNow(t *testing.T) {
	t.Parallel()
	c := testConn(t)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	app := dlqtest.Dial(t)
	q := dlqtest.Name(t, "queue-look")
	if _, err := dlqtest.Channel(t, app).QueueDeclare(q, true, false, false, false, nil); err != nil {
		t.Fatalf("declare %s: %v", q, err)
	}
	dlqtest.DeleteQueues(t, app, q)
	if exists, err := QueueExistsNow(ctx, c, q); err != nil || !exists {
		t.Fatalf("declared queue: got %v, %v; want true", exists, err)
	}
	if exists, err := QueueExistsNow(ctx, c, q+".nope"); err != nil || exists {
		t.Fatalf("missing queue: got %v, %v; want false", exists, err)
	}
	c.setBlocked(true)
	if _, err := QueueExistsNow(ctx, c, q); !errors.Is(err, ErrBlocked) {
		t.Fatalf("blocked: got %v, want ErrBlocked", err)
	}
}
