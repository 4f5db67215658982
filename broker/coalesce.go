package broker

import (
	"net"
	"sync"
	"time"
)

// coalescingConn gathers the writes made to a connection within a short
// delay into one write. amqp091-go flushes its buffer after every publish,
// so a replay at 17,000 messages a second made 17,000 write system calls,
// each a TCP segment that RabbitMQ read and handled on its own. On a
// machine where dlq, RabbitMQ and PostgreSQL share the CPU that cost
// every one of them (docs/BENCHMARKS.md, Replay). A frame waits at most
// coalesceDelay before it leaves, which nothing in AMQP notices: confirms
// take milliseconds, heartbeats seconds.
//
// A write error is returned by the next Write (or Close), so amqp091-go
// sees it as it would have seen the original write fail and shuts the
// connection down; what was written after the failure never reaches the
// broker, and its publishes end as unknown with the connection.
type coalescingConn struct {
	net.Conn
	delay time.Duration

	mu    sync.Mutex
	buf   []byte
	timer *time.Timer
	armed bool
	err   error
}

const (
	// coalesceDelay is how long a write may wait for others: at replay
	// rates a few publishes, and 1 ms measured slower (the window of
	// unconfirmed publishes drains later).
	coalesceDelay = 200 * time.Microsecond
	// coalesceMax bounds the bytes gathered: a larger write goes out at
	// once, and anything already waiting goes out first.
	coalesceMax = 64 << 10
)

func newCoalescingConn(c net.Conn, delay time.Duration) *coalescingConn {
	cc := &coalescingConn{Conn: c, delay: delay}
	cc.timer = time.AfterFunc(time.Hour, cc.flush)
	cc.timer.Stop()
	return cc
}

func (c *coalescingConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.err != nil {
		return 0, c.err
	}
	if len(c.buf)+len(p) > coalesceMax {
		if c.flushLocked(); c.err != nil {
			return 0, c.err
		}
		if len(p) >= coalesceMax {
			var n int
			n, c.err = c.Conn.Write(p)
			return n, c.err
		}
	}
	c.buf = append(c.buf, p...)
	if !c.armed {
		c.armed = true
		c.timer.Reset(c.delay)
	}
	return len(p), nil
}

func (c *coalescingConn) flush() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.armed = false
	c.flushLocked()
}

func (c *coalescingConn) flushLocked() {
	if len(c.buf) == 0 || c.err != nil {
		return
	}
	_, c.err = c.Conn.Write(c.buf)
	c.buf = c.buf[:0]
}

// Close sends what is waiting (amqp091-go's connection.close among it),
// then closes the connection.
func (c *coalescingConn) Close() error {
	c.mu.Lock()
	c.timer.Stop()
	c.armed = false
	c.flushLocked()
	c.mu.Unlock()
	return c.Conn.Close()
}
