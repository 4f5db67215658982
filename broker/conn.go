package broker

import (
	"cmp"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/internal/redact"
	"github.com/dlq/dlq/internal/tlsconf"
)

// ConnConfig configures a Conn.
type ConnConfig struct {
	// URL is the RabbitMQ URL, or the URLs of a cluster's nodes separated
	// by commas (SplitURLs): the Conn dials them in turn and, when its
	// connection drops, starts with the next one. Required.
	URL string
	// Name is shown as the connection name in RabbitMQ's management UI.
	// Optional; default "dlq".
	Name string
	// MinBackoff and MaxBackoff bound the wait between dial attempts.
	// Optional; defaults 100ms and 5s.
	MinBackoff, MaxBackoff time.Duration
	// Logger is optional; default slog.Default().
	Logger *slog.Logger
	// Up, when set, is told whether the connection is up (the dlq_up gauge).
	// Optional.
	Up prometheus.Gauge
	// TLS is the client side of an amqps:// connection: the CAs to trust,
	// a client certificate, the server name. Optional; default the
	// system's CAs and the URL's host. The URL's own TLS parameters
	// (cacertfile, certfile, keyfile, server_name_indication) are read
	// when it is nil.
	TLS *tls.Config
}

// ErrClosed is returned once Close was called.
var ErrClosed = errors.New("broker: connection closed")

// Conn is dlq's single reconnect layer: it keeps one AMQP connection alive,
// redialling with backoff whenever it drops, and hands out channels on
// whatever connection is current. Everything that talks to RabbitMQ goes
// through a Conn, so for each connection there is exactly one place that
// decides when the broker is gone and when it is back. (dlq serve keeps
// two: one for ingest and the control queue, one for replay's publishes,
// which an alarm in RabbitMQ may block.)
//
// A channel belongs to the connection it was opened on. Users watch their
// channel (NotifyClose, or a closed deliveries channel) and, when it dies,
// drop everything received on it — delivery tags are meaningless on any
// other channel — and ask for a new one.
type Conn struct {
	cfg  ConnConfig
	urls []string
	log  *slog.Logger
	done chan struct{}
	wg   sync.WaitGroup
	// undecodable holds the header tables the frame filters of this Conn's
	// connections replaced, until their consumers take them.
	undecodable *undecodableTables
	// raw says which deliveries carry their header table as bytes.
	raw *rawConfig

	mu      sync.Mutex
	conn    *amqp.Connection
	ready   chan struct{} // closed when conn is set; replaced when it drops
	blocked bool
	closed  bool
	lastErr error
}

// NewConn validates cfg and starts connecting in the background.
func NewConn(cfg ConnConfig) (*Conn, error) {
	urls, err := ParseURLs(cfg.URL)
	if err != nil {
		return nil, err
	}
	cfg.Name = cmp.Or(cfg.Name, "dlq")
	cfg.MinBackoff = cmp.Or(cfg.MinBackoff, 100*time.Millisecond)
	cfg.MaxBackoff = cmp.Or(cfg.MaxBackoff, 5*time.Second)
	c := &Conn{
		cfg:   cfg,
		urls:  urls,
		log:   cmp.Or(cfg.Logger, slog.Default()).With("component", "amqp"),
		done:  make(chan struct{}),
		ready: make(chan struct{}),

		undecodable: newUndecodableTables(),
		raw:         newRawConfig(),
	}
	c.wg.Add(1)
	go c.loop()
	return c, nil
}

func (c *Conn) loop() {
	defer c.wg.Done()
	backoff := c.cfg.MinBackoff
	// next is the URL to dial next, also after a lost connection: its node
	// may be the one going down. failed counts dials failed in a row, so
	// that every node is tried once before backing off.
	next, failed := 0, 0
	for {
		addr := c.urls[next]
		next = (next + 1) % len(c.urls)
		conn, err := dialFiltered(addr, amqp.Config{
			Heartbeat:       10 * time.Second,
			Locale:          "en_US",
			Properties:      amqp.Table{"connection_name": c.cfg.Name, "product": "dlq"},
			TLSClientConfig: c.cfg.TLS,
		}, c.undecodable, c.raw)
		if err != nil {
			c.setErr(err)
			if failed++; failed%len(c.urls) != 0 {
				c.log.Warn("cannot connect to RabbitMQ; trying the next node", "url", redact.URL(addr), "error", err)
				continue
			}
			if why, ok := tlsconf.Explain(err, "amqp_tls / DLQ_AMQP_CA_FILE, DLQ_AMQP_SERVER_NAME"); ok {
				c.log.Error("cannot connect to RabbitMQ over TLS; retrying", "url", redact.URL(addr), "retry_in", backoff, "error", why)
			} else {
				c.log.Warn("cannot connect to RabbitMQ; retrying", "url", redact.URL(addr), "retry_in", backoff, "error", err)
			}
			select {
			case <-c.done:
				return
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, c.cfg.MaxBackoff)
			continue
		}
		backoff, failed = c.cfg.MinBackoff, 0
		// Both notification channels are buffered and always drained:
		// amqp091 blocks (and since v1.13 drops after 5 s) when nobody reads.
		closed := conn.NotifyClose(make(chan *amqp.Error, 1))
		blocked := conn.NotifyBlocked(make(chan amqp.Blocking, 8))
		c.set(conn)
		c.log.Info("connected to RabbitMQ", "url", redact.URL(addr), "server_version", conn.Properties["version"])
	watch:
		for {
			select {
			case b := <-blocked:
				c.setBlocked(b.Active)
				if b.Active {
					c.log.Warn("RabbitMQ blocked publishing on this connection", "reason", b.Reason)
				} else {
					c.log.Info("RabbitMQ unblocked publishing")
				}
			case e := <-closed:
				c.clear(e)
				if e != nil {
					c.log.Warn("RabbitMQ connection lost; reconnecting", "error", e)
				}
				break watch
			case <-c.done:
				c.clear(nil)
				_ = conn.Close()
				return
			}
		}
	}
}

func (c *Conn) set(conn *amqp.Connection) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.conn = conn
	c.lastErr = nil
	c.blocked = false
	close(c.ready)
	if c.cfg.Up != nil {
		c.cfg.Up.Set(1)
	}
}

func (c *Conn) clear(e *amqp.Error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return
	}
	c.conn = nil
	c.blocked = false
	if e != nil {
		c.lastErr = e
	}
	c.ready = make(chan struct{})
	if c.cfg.Up != nil {
		c.cfg.Up.Set(0)
	}
}

func (c *Conn) setErr(err error) {
	c.mu.Lock()
	c.lastErr = err
	c.mu.Unlock()
	if c.cfg.Up != nil {
		c.cfg.Up.Set(0)
	}
}

func (c *Conn) setBlocked(b bool) {
	c.mu.Lock()
	c.blocked = b
	c.mu.Unlock()
}

// Channel opens a channel on the current connection, waiting for one if
// the broker is unreachable, until ctx ends.
func (c *Conn) Channel(ctx context.Context) (*amqp.Channel, error) {
	for {
		c.mu.Lock()
		conn, ready, closed := c.conn, c.ready, c.closed
		c.mu.Unlock()
		if closed {
			return nil, ErrClosed
		}
		if conn != nil {
			ch, err := conn.Channel()
			if err == nil {
				return ch, nil
			}
			if !conn.IsClosed() {
				return nil, fmt.Errorf("broker: open channel: %w", err)
			}
			// The connection died under us; the loop will notice and
			// replace ready.
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(50 * time.Millisecond):
			}
			continue
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("broker: waiting for RabbitMQ: %w", context.Cause(ctx))
		case <-c.done:
			return nil, ErrClosed
		case <-ready:
		}
	}
}

// Connected reports whether a connection is up right now, and if not, the
// last error seen.
func (c *Conn) Connected() (bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn != nil && !c.conn.IsClosed() {
		return true, nil
	}
	return false, cmp.Or(c.lastErr, errors.New("not connected yet"))
}

// Blocked reports whether RabbitMQ is refusing publishes on this connection
// (a memory or disk alarm).
func (c *Conn) Blocked() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.blocked
}

// ServerVersion returns the broker's version string, "" when unknown.
func (c *Conn) ServerVersion() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.conn == nil {
		return ""
	}
	v, _ := c.conn.Properties["version"].(string)
	return v
}

// Closed reports whether Close was called: the Conn never connects again.
func (c *Conn) Closed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

// Close closes the connection and stops reconnecting. Channels opened from
// it close too, so callers finish their acknowledgements first.
func (c *Conn) Close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	c.mu.Unlock()
	close(c.done)
	c.wg.Wait()
}
