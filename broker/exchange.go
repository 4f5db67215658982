package broker

import (
	"context"
	"errors"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"
)

// ExchangeExists reports whether an exchange exists, on a throwaway
// channel (a failed passive declare closes the channel it ran on). The
// default exchange ("") always exists.
//
// It returns when ctx ends even if the broker does not answer: amqp091-go
// takes no context for opening a channel or declaring, and a connection
// RabbitMQ blocked (an alarm) or a link gone silent leaves both waiting
// until the connection closes. The look then finishes in the background
// and closes its channel when the broker call returns.
func ExchangeExists(ctx context.Context, c *Conn, name string) (bool, error) {
	return exchangeLook{conn: c, declare: declarePassive}.exists(ctx, name)
}

// QueueExistsNow reports whether a queue exists, as ExchangeExistsNow
// does for an exchange (a passive declare on a throwaway channel, not at
// all while RabbitMQ blocks the connection, returning when ctx ends): a
// replay through the default exchange reaches only the queue its routing
// key names, and is returned unroutable when there is none. A queue
// another connection holds exclusively is an error (RESOURCE_LOCKED), not
// an answer.
func QueueExistsNow(ctx context.Context, c *Conn, name string) (bool, error) {
	if c.Blocked() {
		return false, fmt.Errorf("broker: look up queue %q: %w", name, ErrBlocked)
	}
	return exchangeLook{conn: c, declare: declareQueuePassive, what: "queue"}.exists(ctx, name)
}

// ErrBlocked means RabbitMQ blocks the connection (a memory or disk
// alarm): ExchangeExistsNow did not look.
var ErrBlocked = errors.New("broker: RabbitMQ blocks the connection (a resource alarm); not looking")

// ExchangeExistsNow is ExchangeExists for a caller that waits on the
// answer (a page): while RabbitMQ blocks the connection it does not look
// at all, and returns ErrBlocked, rather than start a look that can only
// end when the alarm clears or the connection closes.
func ExchangeExistsNow(ctx context.Context, c *Conn, name string) (bool, error) {
	if name != "" && c.Blocked() {
		return false, fmt.Errorf("broker: look up exchange %q: %w", name, ErrBlocked)
	}
	return ExchangeExists(ctx, c, name)
}

// exchangeLook is one look at an exchange (or a queue). declare is the passive
// declare: a field so that a test can stand in a broker that does not
// answer.
type exchangeLook struct {
	conn    *Conn
	declare func(ch *amqp.Channel, name string) error
	// what is looked up, for errors: "exchange" when empty, or "queue".
	what string
}

func declarePassive(ch *amqp.Channel, name string) error {
	return ch.ExchangeDeclarePassive(name, "topic", true, false, false, false, nil)
}

func declareQueuePassive(ch *amqp.Channel, name string) error {
	_, err := ch.QueueDeclarePassive(name, true, false, false, false, nil)
	return err
}

func (l exchangeLook) kind() string {
	if l.what == "" {
		return "exchange"
	}
	return l.what
}

type exchangeAnswer struct {
	exists bool
	err    error
}

func (l exchangeLook) exists(ctx context.Context, name string) (bool, error) {
	if name == "" && l.what == "" {
		// The default exchange.
		return true, nil
	}
	// Buffered: the look sends its answer and ends even when nobody
	// waits for it any more.
	got := make(chan exchangeAnswer, 1)
	go func() {
		exists, err := l.look(ctx, name)
		got <- exchangeAnswer{exists: exists, err: err}
	}()
	select {
	case a := <-got:
		return a.exists, a.err
	case <-ctx.Done():
		return false, fmt.Errorf("broker: look up %s %q: no answer in time: %w", l.kind(), name, context.Cause(ctx))
	}
}

func (l exchangeLook) look(ctx context.Context, name string) (bool, error) {
	ch, err := l.conn.Channel(ctx)
	if err != nil {
		return false, fmt.Errorf("broker: look up %s %q: %w", l.kind(), name, err)
	}
	defer ch.Close()
	err = l.declare(ch, name)
	var ae *amqp.Error
	switch {
	case err == nil:
		return true, nil
	case errors.As(err, &ae) && ae.Code == amqp.NotFound:
		return false, nil
	}
	return false, fmt.Errorf("broker: look up %s %q: %w", l.kind(), name, err)
}
