package broker

import (
	"cmp"
	"context"
	"errors"
	"log/slog"
	"sync"
	"time"
)

// DeclarerConfig configures a Declarer.
type DeclarerConfig struct {
	// Conn is the connection to declare on. Required.
	Conn *Conn
	// Topology is what to declare. Required: at least its Exchange.
	Topology Topology
	// Sources also declares Topology.Sources (topology.declare_sources).
	// Optional.
	Sources bool
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
}

func (c *DeclarerConfig) validate() error {
	if c.Conn == nil {
		return errors.New("broker: DeclarerConfig.Conn is required")
	}
	if c.Topology.Exchange == "" {
		return errors.New("broker: DeclarerConfig.Topology.Exchange is required")
	}
	return nil
}

// Declarer declares dlq's topology in the background of a running dlq,
// retrying while RabbitMQ is unreachable. A refusal (for example a queue
// that exists with other arguments) is logged with its explanation and
// retried slowly, so an operator's fix takes effect without a restart and
// dlq never crash-loops.
type Declarer struct {
	cfg       DeclarerConfig
	log       *slog.Logger
	tried     chan struct{}
	triedOnce sync.Once
}

// NewDeclarer validates cfg.
func NewDeclarer(cfg DeclarerConfig) (*Declarer, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	return &Declarer{cfg: cfg, log: cmp.Or(cfg.Logger, slog.Default()), tried: make(chan struct{})}, nil
}

// Tried is closed once the first attempt at what ingest consumes from
// (the exchange and dlq's queues) is over, whatever its outcome (or once
// Run returns without one): consumers can start after it, so a fresh
// broker does not greet them with "no queue", while a refusal being
// retried does not hold them back. The control queue and the source queues
// come after it: ingest does not wait for them (a new quorum queue can take
// a busy broker a second to create, and the control queue's consumer
// declares its queue itself).
func (d *Declarer) Tried() <-chan struct{} { return d.tried }

func (d *Declarer) markTried() { d.triedOnce.Do(func() { close(d.tried) }) }

// Run declares the topology, retrying until it is declared or ctx ends.
// It returns nil in both cases: a refusal is logged, never fatal.
func (d *Declarer) Run(ctx context.Context) error {
	t := d.cfg.Topology
	backoff := time.Second
	defer d.markTried()
	for ctx.Err() == nil {
		err := DeclareIngest(ctx, d.cfg.Conn, t)
		d.markTried()
		if err == nil {
			err = DeclareControl(ctx, d.cfg.Conn, t)
		}
		if err == nil && d.cfg.Sources && len(t.Sources) > 0 {
			err = DeclareSources(ctx, d.cfg.Conn, t, d.log)
		}
		if err == nil {
			d.log.Info("topology declared", "exchange", t.Exchange, "queues", t.Queues, "control_queue", t.ControlQueue)
			return nil
		}
		if ctx.Err() != nil {
			return nil
		}
		if errors.Is(err, ErrPrecondition) || errors.Is(err, ErrInvalidTopology) {
			backoff = 30 * time.Second
		}
		d.log.Error("cannot declare topology; retrying", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(backoff):
		}
		backoff = min(backoff*2, 30*time.Second)
	}
	return nil
}
