package broker

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// SourceQueue is an application queue dlq can declare with its dead-letter
// arguments (`dlq topology`).
type SourceQueue struct {
	// Name of the queue. Required.
	Name string `yaml:"name"`
	// Type is quorum (default) or classic.
	Type string `yaml:"type"`
	// DeadLetterExchange is where the queue's dead messages go. Optional;
	// default dlq's exchange. "" (set explicitly) means the default exchange,
	// which routes by DeadLetterRoutingKey straight to a queue of that name.
	DeadLetterExchange *string `yaml:"dead_letter_exchange"`
	// DeadLetterRoutingKey replaces the routing key of dead messages.
	// Optional; default keep the original routing key.
	DeadLetterRoutingKey string `yaml:"dead_letter_routing_key"`
	// DeadLetterStrategy is at-least-once (default for quorum queues:
	// RabbitMQ keeps a dead message until our exchange's queue confirms it)
	// or at-most-once. Quorum only.
	DeadLetterStrategy string `yaml:"dead_letter_strategy"`
	// DeliveryLimit dead-letters a message after this many deliveries.
	// Quorum only. Optional; 0 means the broker's default.
	DeliveryLimit int `yaml:"delivery_limit"`
	// MessageTTL dead-letters messages older than this. Optional.
	MessageTTL time.Duration `yaml:"message_ttl"`
	// MaxLength and MaxLengthBytes bound the queue. Optional.
	MaxLength      int64 `yaml:"max_length"`
	MaxLengthBytes int64 `yaml:"max_length_bytes"`
	// Overflow is drop-head (dead-letters the oldest), reject-publish or
	// reject-publish-dlx. Optional; default drop-head for classic queues and
	// reject-publish for quorum queues with at-least-once dead-lettering.
	Overflow string `yaml:"overflow"`
	// Bindings bind the queue to exchanges. Optional.
	Bindings []Binding `yaml:"bindings"`
}

// Binding binds a queue to an exchange.
type Binding struct {
	Exchange   string `yaml:"exchange"`
	RoutingKey string `yaml:"routing_key"`
}

// Topology is what dlq declares.
type Topology struct {
	// Exchange is the dead-letter exchange (durable topic). Required.
	Exchange string
	// Queues are dlq's own dead-letter queues, bound to Exchange with "#".
	// Required.
	Queues []string
	// ControlQueue receives control commands. Optional.
	ControlQueue string
	// Sources are declared only by DeclareSources.
	Sources []SourceQueue
}

// ErrInvalidTopology wraps every refusal of Validate.
var ErrInvalidTopology = errors.New("invalid topology")

func (s SourceQueue) dlx(own string) string {
	if s.DeadLetterExchange == nil {
		return own
	}
	return *s.DeadLetterExchange
}

func (s SourceQueue) typ() string {
	if s.Type == "" {
		return "quorum"
	}
	return s.Type
}

// Validate refuses a topology that would lose or loop messages. It needs no
// broker; DeclareSources checks what only the broker knows.
func (t Topology) Validate() error {
	var errs []error
	bad := func(format string, a ...any) {
		errs = append(errs, fmt.Errorf("%w: "+format, append([]any{ErrInvalidTopology}, a...)...))
	}
	if t.Exchange == "" {
		bad("the dead-letter exchange name is empty")
	}
	own := map[string]bool{}
	for _, q := range t.Queues {
		own[q] = true
	}
	sources := map[string]SourceQueue{}
	for i, s := range t.Sources {
		if s.Name == "" {
			bad("topology.source_queues[%d].name is empty", i)
			continue
		}
		if _, dup := sources[s.Name]; dup {
			bad("source queue %q is listed twice", s.Name)
		}
		sources[s.Name] = s
	}
	for _, s := range t.Sources {
		if s.Name == "" {
			continue
		}
		if own[s.Name] || s.Name == t.ControlQueue {
			bad("source queue %q is one of dlq's own queues: a queue cannot be its own dead-letter queue", s.Name)
		}
		s.validateArgs(bad)
		s.validateLimits(bad)
		t.validateDeadLetterEdge(s, own, sources, bad)
	}
	return errors.Join(errs...)
}

// validateArgs reports through bad what is wrong with the queue's type,
// dead-letter strategy and overflow, alone and together.
func (s SourceQueue) validateArgs(bad func(format string, a ...any)) {
	switch s.typ() {
	case "quorum", "classic":
	default:
		bad("source queue %q: type %q must be quorum or classic", s.Name, s.Type)
	}
	if s.typ() == "classic" && s.DeliveryLimit != 0 {
		bad("source queue %q: delivery_limit needs a quorum queue (classic queues do not count deliveries)", s.Name)
	}
	if s.typ() == "classic" && s.DeadLetterStrategy != "" {
		bad("source queue %q: dead_letter_strategy applies to quorum queues only", s.Name)
	}
	switch s.DeadLetterStrategy {
	case "", "at-least-once", "at-most-once":
	default:
		bad("source queue %q: dead_letter_strategy %q must be at-least-once or at-most-once", s.Name, s.DeadLetterStrategy)
	}
	switch s.Overflow {
	case "", "drop-head", "reject-publish", "reject-publish-dlx":
	default:
		bad("source queue %q: overflow %q must be drop-head, reject-publish or reject-publish-dlx", s.Name, s.Overflow)
	}
	if s.typ() == "quorum" && s.DeadLetterStrategy != "at-most-once" && s.Overflow != "" && s.Overflow != "reject-publish" {
		bad("source queue %q: at-least-once dead-lettering needs overflow reject-publish; set dead_letter_strategy: at-most-once to accept overflow %s", s.Name, s.Overflow)
	}
}

// validateLimits reports through bad what is wrong with the queue's
// limits, its name's length and its bindings.
func (s SourceQueue) validateLimits(bad func(format string, a ...any)) {
	for _, n := range []struct {
		key string
		v   any
		neg bool
	}{
		{"delivery_limit", s.DeliveryLimit, s.DeliveryLimit < 0},
		{"message_ttl", s.MessageTTL, s.MessageTTL < 0},
		{"max_length", s.MaxLength, s.MaxLength < 0},
		{"max_length_bytes", s.MaxLengthBytes, s.MaxLengthBytes < 0},
	} {
		if n.neg {
			bad("source queue %q: %s %v must not be negative (0 or unset: no limit)", s.Name, n.key, n.v)
		}
	}
	if s.MessageTTL > 0 && s.MessageTTL < time.Millisecond {
		bad("source queue %q: message_ttl %s is below RabbitMQ's resolution of 1ms", s.Name, s.MessageTTL)
	}
	if len(s.Name) > 255 {
		bad("source queue %q is %d bytes long; RabbitMQ allows at most 255", s.Name, len(s.Name))
	}
	for j, b := range s.Bindings {
		if b.Exchange == "" {
			bad("source queue %q: bindings[%d].exchange is empty (every queue is bound to the default exchange already)", s.Name, j)
		}
	}
}

// validateDeadLetterEdge reports through bad a source queue s that
// dead-letters through the default exchange to itself or into another
// source queue (sources, by name) rather than one of dlq's own queues.
func (t Topology) validateDeadLetterEdge(s SourceQueue, own map[string]bool, sources map[string]SourceQueue, bad func(format string, a ...any)) {
	if s.dlx(t.Exchange) != "" {
		return
	}
	// The default exchange routes straight to the queue named by the
	// routing key: follow the edge.
	target := s.DeadLetterRoutingKey
	switch {
	case target == "" || target == s.Name:
		bad("source queue %q dead-letters through the default exchange to itself: a queue cannot be its own dead-letter queue", s.Name)
	case own[target]:
		// Straight into one of dlq's queues: fine.
	default:
		if next, ok := sources[target]; ok {
			bad("source queue %q dead-letters into %q, which itself dead-letters to %q: dead-letter chains are not allowed (point both at %q)",
				s.Name, target, cmp.Or(next.dlx(t.Exchange), "(default exchange)"), t.Exchange)
		}
	}
}

// OwnQueueArgs are the arguments of dlq's own dead-letter queues: durable
// quorum queues with no length limit, no TTL, no dead-letter exchange of
// their own (no chains) and, on RabbitMQ 4 and later where quorum queues
// default to a delivery limit of 20, an explicitly unlimited delivery count.
// Nothing RabbitMQ could drop before dlq has stored it.
func OwnQueueArgs(serverVersion string) amqp.Table {
	args := amqp.Table{"x-queue-type": "quorum"}
	if major(serverVersion) >= 4 {
		args["x-delivery-limit"] = int64(-1)
	}
	return args
}

func major(v string) int {
	n, _ := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	return n
}

// DeclareOwn declares the dead-letter exchange, dlq's queues bound to it
// with "#", and the control queue. It is idempotent.
func DeclareOwn(ctx context.Context, c *Conn, t Topology) error {
	if err := DeclareIngest(ctx, c, t); err != nil {
		return err
	}
	return DeclareControl(ctx, c, t)
}

// DeclareIngest declares what ingest consumes from: the dead-letter
// exchange and dlq's queues bound to it with "#". It is idempotent.
func DeclareIngest(ctx context.Context, c *Conn, t Topology) error {
	if err := withChannel(ctx, c, func(ch *amqp.Channel) error {
		return ch.ExchangeDeclare(t.Exchange, "topic", true, false, false, false, nil)
	}); err != nil {
		return explain(err, "declare dead-letter exchange %q (durable topic)", t.Exchange)
	}
	args := OwnQueueArgs(c.ServerVersion())
	for _, q := range t.Queues {
		if err := DeclareOwnQueue(ctx, c, t.Exchange, q, args); err != nil {
			return err
		}
	}
	return nil
}

// DeclareControl declares the control queue (none configured: nothing).
// It is idempotent.
func DeclareControl(ctx context.Context, c *Conn, t Topology) error {
	if t.ControlQueue == "" {
		return nil
	}
	if err := withChannel(ctx, c, func(ch *amqp.Channel) error {
		_, err := ch.QueueDeclare(t.ControlQueue, true, false, false, false, amqp.Table{"x-queue-type": "quorum"})
		return err
	}); err != nil {
		return explain(err, "declare control queue %q (durable quorum)", t.ControlQueue)
	}
	return nil
}

// DeclareOwnQueue declares one of dlq's queues and binds it with "#".
func DeclareOwnQueue(ctx context.Context, c *Conn, exchange, queue string, args amqp.Table) error {
	err := withChannel(ctx, c, func(ch *amqp.Channel) error {
		if _, err := ch.QueueDeclare(queue, true, false, false, false, args); err != nil {
			return err
		}
		return ch.QueueBind(queue, "#", exchange, false, nil)
	})
	if err != nil {
		return explain(err, "declare dead-letter queue %q (durable quorum, no dead-letter exchange, no limits) bound to %q with #", queue, exchange)
	}
	return nil
}

// DeclareSources validates the topology, checks what only the broker knows
// (dead-letter targets exist) and declares the source queues. Each queue is
// declared on its own channel, because a refusal closes the channel.
func DeclareSources(ctx context.Context, c *Conn, t Topology, log *slog.Logger) error {
	if err := t.Validate(); err != nil {
		return err
	}
	own := map[string]bool{}
	for _, q := range t.Queues {
		own[q] = true
	}
	declared := map[string]bool{}
	for _, s := range t.Sources {
		declared[s.Name] = true
	}
	var errs []error
	for _, s := range t.Sources {
		dlx := s.dlx(t.Exchange)
		switch {
		case dlx != "" && dlx != t.Exchange:
			if err := withChannel(ctx, c, func(ch *amqp.Channel) error {
				return ch.ExchangeDeclarePassive(dlx, "topic", true, false, false, false, nil)
			}); err != nil {
				errs = append(errs, fmt.Errorf("%w: source queue %q dead-letters to exchange %q, which does not exist (declare it, or leave dead_letter_exchange unset to use %q)",
					ErrInvalidTopology, s.Name, dlx, t.Exchange))
				continue
			}
			log.Warn("source queue dead-letters to an exchange dlq does not consume from", "queue", s.Name, "dead_letter_exchange", dlx)
		case dlx == "" && !own[s.DeadLetterRoutingKey] && !declared[s.DeadLetterRoutingKey]:
			target := s.DeadLetterRoutingKey
			if err := withChannel(ctx, c, func(ch *amqp.Channel) error {
				_, err := ch.QueueDeclarePassive(target, true, false, false, false, nil)
				return err
			}); err != nil {
				errs = append(errs, fmt.Errorf("%w: source queue %q dead-letters to queue %q, which does not exist", ErrInvalidTopology, s.Name, target))
				continue
			}
		}
		args := s.args(t.Exchange)
		err := withChannel(ctx, c, func(ch *amqp.Channel) error {
			if _, err := ch.QueueDeclare(s.Name, true, false, false, false, args); err != nil {
				return err
			}
			for _, b := range s.Bindings {
				if err := ch.QueueBind(s.Name, b.RoutingKey, b.Exchange, false, nil); err != nil {
					return err
				}
			}
			return nil
		})
		if err != nil {
			errs = append(errs, explain(err, "declare source queue %q with %s", s.Name, formatArgs(args)))
		}
	}
	return errors.Join(errs...)
}

func (s SourceQueue) args(ownExchange string) amqp.Table {
	a := amqp.Table{
		"x-queue-type":           s.typ(),
		"x-dead-letter-exchange": s.dlx(ownExchange),
	}
	if s.DeadLetterRoutingKey != "" {
		a["x-dead-letter-routing-key"] = s.DeadLetterRoutingKey
	}
	if s.DeliveryLimit > 0 {
		a["x-delivery-limit"] = int64(s.DeliveryLimit)
	}
	if s.MessageTTL > 0 {
		a["x-message-ttl"] = s.MessageTTL.Milliseconds()
	}
	if s.MaxLength > 0 {
		a["x-max-length"] = s.MaxLength
	}
	if s.MaxLengthBytes > 0 {
		a["x-max-length-bytes"] = s.MaxLengthBytes
	}
	overflow := s.Overflow
	if s.typ() == "quorum" {
		strategy := s.DeadLetterStrategy
		if strategy == "" {
			strategy = "at-least-once"
		}
		a["x-dead-letter-strategy"] = strategy
		if strategy == "at-least-once" && overflow == "" {
			overflow = "reject-publish"
		}
	}
	if overflow != "" {
		a["x-overflow"] = overflow
	}
	return a
}

func formatArgs(a amqp.Table) string {
	keys := make([]string, 0, len(a))
	for k := range a {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s=%v", k, a[k])
	}
	return "{" + strings.Join(parts, ", ") + "}"
}

// withChannel runs fn on a fresh channel and closes it. A protocol error
// (404, 406) closes the channel anyway; nothing else is affected.
func withChannel(ctx context.Context, c *Conn, fn func(*amqp.Channel) error) error {
	ch, err := c.Channel(ctx)
	if err != nil {
		return err
	}
	defer ch.Close()
	return fn(ch)
}

// ErrPrecondition is returned when RabbitMQ refuses a declaration because
// the object exists with other arguments.
var ErrPrecondition = errors.New("exists with different arguments")

func explain(err error, format string, a ...any) error {
	what := fmt.Sprintf(format, a...)
	var ae *amqp.Error
	if errors.As(err, &ae) {
		switch ae.Code {
		case amqp.PreconditionFailed:
			return fmt.Errorf("broker: %s: %w: RabbitMQ said %q. The existing object was declared with other arguments; "+
				"RabbitMQ never changes them in place. Either delete it (messages in it are lost unless moved first) "+
				"or change dlq's configuration to match it", what, ErrPrecondition, ae.Reason)
		case amqp.AccessRefused:
			return fmt.Errorf("broker: %s: the RabbitMQ user may not do this (%s); grant configure permission on it", what, ae.Reason)
		case amqp.NotFound:
			return fmt.Errorf("broker: %s: %s", what, ae.Reason)
		}
	}
	return fmt.Errorf("broker: %s: %w", what, err)
}
