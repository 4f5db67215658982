package control

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
)

// directReplyTo is RabbitMQ's pseudo-queue for RPC answers: no queue to
// declare or clean up, and answers go only to the channel that asked.
const directReplyTo = "amq.rabbitmq.reply-to"

// ErrUnreachable means the broker could not be reached, or the control
// queue does not exist (no dlq has declared it).
var ErrUnreachable = errors.New("control queue unreachable")

// ErrNoAnswer means no answer came in time.
var ErrNoAnswer = errors.New("no answer from dlq")

// Client sends control commands and waits for their answers (an RPC over
// the control queue), for the CLI and for applications written in Go. It
// holds its own short-lived AMQP connection: a command-line tool should
// fail fast when the broker is down, not reconnect forever.
type Client struct {
	queue string
	token string
	conn  *amqp.Connection

	mu      sync.Mutex
	ch      *amqp.Channel
	answers <-chan amqp.Delivery
	returns chan amqp.Return
}

// Dial connects to the broker at url for commands to queue, sent with
// token. url may name a cluster's nodes separated by commas
// (broker.SplitURLs): the first that answers is used.
func Dial(ctx context.Context, url, queue, token string) (*Client, error) {
	return DialTLS(ctx, url, queue, token, nil)
}

// DialTLS is Dial with the client side of an amqps:// connection (nil:
// the system's CAs and the URL's host).
func DialTLS(ctx context.Context, url, queue, token string, tlsCfg *tls.Config) (*Client, error) {
	cfg := amqp.Config{Heartbeat: 10 * time.Second, Locale: "en_US", Properties: amqp.Table{"connection_name": "dlq cli"}, TLSClientConfig: tlsCfg}
	if dl, ok := ctx.Deadline(); ok {
		cfg.Dial = amqp.DefaultDial(time.Until(dl))
	} else {
		cfg.Dial = amqp.DefaultDial(10 * time.Second)
	}
	var conn *amqp.Connection
	var errs []error
	for _, u := range broker.SplitURLs(url) {
		c, err := amqp.DialConfig(u, cfg)
		if err == nil {
			conn = c
			break
		}
		errs = append(errs, err)
	}
	if conn == nil {
		return nil, fmt.Errorf("%w: connect to RabbitMQ: %w", ErrUnreachable, errors.Join(errs...))
	}
	ch, err := conn.Channel()
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: open channel: %w", ErrUnreachable, err)
	}
	answers, err := ch.Consume(directReplyTo, "", true, false, false, false, nil)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("%w: consume %s: %w", ErrUnreachable, directReplyTo, err)
	}
	return &Client{
		queue: queue, token: token, conn: conn, ch: ch, answers: answers,
		returns: ch.NotifyReturn(make(chan amqp.Return, 4)),
	}, nil
}

// Close closes the connection.
func (c *Client) Close() error { return c.conn.Close() }

// Call sends cmd (a Command, or any value whose JSON is a command) and
// returns the answer. A command without a command_id gets a fresh one.
func (c *Client) Call(ctx context.Context, cmd Command) (Answer, error) {
	if cmd.CommandID == "" {
		cmd.CommandID = rand.Text()
	}
	body, err := json.Marshal(cmd)
	if err != nil {
		return Answer{}, fmt.Errorf("encode command: %w", err)
	}
	return c.CallRaw(ctx, body)
}

// CallRaw sends a raw command body and returns the answer.
func (c *Client) CallRaw(ctx context.Context, body []byte) (Answer, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	corr := rand.Text()
	headers := amqp.Table{}
	if c.token != "" {
		headers[TokenHeader] = c.token
	}
	pub := amqp.Publishing{
		ContentType: "application/json", DeliveryMode: amqp.Persistent, ReplyTo: directReplyTo,
		CorrelationId: corr, Headers: headers, Body: body, Timestamp: time.Now(),
	}
	if dl, ok := ctx.Deadline(); ok {
		// A command no dlq takes before the caller stops waiting expires
		// unread: the caller reports it unanswered, and it must not run
		// later, when nobody expects it (each retry a new command).
		pub.Expiration = strconv.FormatInt(max(time.Until(dl).Milliseconds(), 1), 10)
	}
	err := c.ch.PublishWithContext(ctx, "", c.queue, true, false, pub)
	if err != nil {
		return Answer{}, fmt.Errorf("%w: send command: %w", ErrUnreachable, err)
	}
	for {
		select {
		case <-ctx.Done():
			return Answer{}, fmt.Errorf("%w: %w", ErrNoAnswer, context.Cause(ctx))
		case r, ok := <-c.returns:
			if !ok {
				return Answer{}, fmt.Errorf("%w: channel closed", ErrUnreachable)
			}
			if r.CorrelationId == corr {
				return Answer{}, fmt.Errorf("%w: queue %q does not exist (is dlq serve running, with DLQ_CONTROL_QUEUE=%s?)", ErrUnreachable, c.queue, c.queue)
			}
		case d, ok := <-c.answers:
			if !ok {
				return Answer{}, fmt.Errorf("%w: channel closed while waiting for the answer", ErrUnreachable)
			}
			if d.CorrelationId != corr {
				continue // a late answer to an earlier call
			}
			var a Answer
			if err := json.Unmarshal(d.Body, &a); err != nil {
				return Answer{}, fmt.Errorf("decode answer: %w", err)
			}
			return a, nil
		}
	}
}
