package broker

import (
	"bytes"
	"encoding/binary"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Header tables delivered as bytes.
//
// For deliveries to the consumers that asked for it (Conn.DeliverRawHeaders,
// by consumer-tag prefix: dlq's ingest consumers), the frame filter takes
// the whole header table out of the content header and gives amqp091-go a
// table of one byte-array entry, headerRaw, holding the Conn's secret and
// the original table's bytes, plus the broker's return counts as they were
// (ReturnCount reads them). amqp091-go then copies the bytes instead of
// building maps, and the consumer reads them with RawTable (RawHeaders).
//
// Which delivery a content header belongs to is said by the method frame
// just before it on the same channel: basic.deliver carries the consumer
// tag; basic.get-ok and basic.return carry none, and their headers are left
// alone. A table amqp091-go cannot decode is still replaced by a token
// (framefilter.go) whichever consumer gets it.
//
// The secret makes the entry unforgeable: a publisher's own header of the
// same name is inside the bytes, never at the top, and a delivery the
// filter did not rewrite (its frame would have grown past frame_max) is
// read the ordinary way.

const headerRaw = "x-dlq-raw-headers"

const (
	classConnection = 10
	methodTune      = 30
	classBasic      = 60
	methodDeliver   = 60
)

// rawConfig is what a Conn's filters share: the consumer-tag prefixes
// whose deliveries carry their table as bytes, and the secret.
type rawConfig struct {
	mu       sync.Mutex // serializes changes to prefixes
	prefixes atomic.Pointer[[]string]
	secret   [8]byte
}

// wanted reports whether deliveries to consumer tag get their table as bytes.
func (c *rawConfig) wanted(tag []byte) bool {
	p := c.prefixes.Load()
	if p == nil {
		return false
	}
	for _, prefix := range *p {
		if len(tag) >= len(prefix) && string(tag[:len(prefix)]) == prefix {
			return true
		}
	}
	return false
}

func newRawConfig() *rawConfig {
	c := &rawConfig{}
	binary.BigEndian.PutUint64(c.secret[:], rand.Uint64())
	return c
}

// rawDeliveries is one connection's filter state.
type rawDeliveries struct {
	cfg *rawConfig
	// clientFrame is the frame size amqp091-go asks for (amqp.Config's
	// FrameSize as it reads it); frameMax the negotiated limit, 0 for none.
	clientFrame, frameMax int
	// next holds the channels whose next content header is a delivery
	// to a consumer with the prefix.
	next map[uint16]bool
}

func (c *rawConfig) forDial(frameSize int) rawDeliveries {
	switch {
	case frameSize == 0:
		frameSize = 131072 // amqp091-go's default (defaultFrameSize)
	case frameSize < 0:
		frameSize = 0 // asked for unlimited
	}
	// Until connection.tune, amqp091-go accepts frames up to its minimum.
	return rawDeliveries{cfg: c, clientFrame: frameSize, frameMax: 4096, next: map[uint16]bool{}}
}

// method notes what a method frame says about the next content header.
func (r *rawDeliveries) method(frame []byte) {
	ch := binary.BigEndian.Uint16(frame[1:3])
	p := frame[7 : len(frame)-1]
	if len(p) < 4 {
		return
	}
	class, method := binary.BigEndian.Uint16(p[0:2]), binary.BigEndian.Uint16(p[2:4])
	switch {
	case ch == 0 && class == classConnection && method == methodTune && len(p) >= 10:
		// amqp091-go negotiates as negotiateFrameSize does.
		server := int(binary.BigEndian.Uint32(p[6:10]))
		size := r.clientFrame
		if size == 0 || server == 0 {
			size = max(size, server)
		} else {
			size = min(size, server)
		}
		if size > 0 && size < 4096 {
			size = 4096
		}
		r.frameMax = size
	case class == classBasic && method == methodDeliver && len(p) >= 5 && len(p) >= 5+int(p[4]):
		if r.cfg.wanted(p[5 : 5+int(p[4])]) {
			r.next[ch] = true
		} else {
			delete(r.next, ch)
		}
	default:
		delete(r.next, ch)
	}
}

// header reports whether a content header frame belongs to a delivery
// whose table goes to the consumer as bytes.
func (r *rawDeliveries) header(frame []byte) bool {
	ch := binary.BigEndian.Uint16(frame[1:3])
	if !r.next[ch] {
		return false
	}
	delete(r.next, ch)
	return true
}

// rewrite appends to dst the content header frame with its (decodable)
// header table given as bytes; ok is false when the frame has no table or
// the new one would not fit frame_max.
func (r *rawDeliveries) rewrite(frame, dst []byte) (out []byte, ok bool) {
	off, n, ok := headerTable(frame)
	if !ok {
		return dst, false
	}
	table := frame[off : off+n]
	grown := 1 + len(headerRaw) + 1 + 4 + len(r.cfg.secret)
	if r.frameMax > 0 && len(frame)+grown > r.frameMax {
		return dst, false
	}
	repl := make([]byte, 0, n+grown) // amqp091-go keeps none of it
	repl = append(repl, byte(len(headerRaw)))
	repl = append(repl, headerRaw...)
	repl = append(repl, 'x')
	repl = binary.BigEndian.AppendUint32(repl, 0)
	repl = append(repl, r.cfg.secret[:]...)
	start := len(repl)
	var counts []byte
	for b := table; len(b) > 0; {
		klen := int(b[0])
		rest, err := skipFieldShallow(b[1+klen:])
		if err != nil {
			return dst, false // not reached: the table is decodable
		}
		entry := b[:len(b)-len(rest)]
		if isReturnCount(string(b[1 : 1+klen])) {
			counts = append(counts, entry...)
		} else {
			repl = append(repl, entry...)
		}
		b = rest
	}
	binary.BigEndian.PutUint32(repl[start-len(r.cfg.secret)-4:], uint32(len(repl)-start+len(r.cfg.secret)))
	repl = append(repl, counts...)
	return replaceTable(dst, frame, off, n, repl), true
}

// DeliverRawHeaders makes deliveries to the consumers on c whose tag starts
// with tagPrefix (not empty) carry their header table as bytes, which
// RawHeaders gives back: only a consumer that reads them so may use such a
// tag. It applies to the deliveries received after it returns, on every
// connection of c.
func (c *Conn) DeliverRawHeaders(tagPrefix string) {
	if tagPrefix == "" {
		return
	}
	c.raw.mu.Lock()
	defer c.raw.mu.Unlock()
	var next []string
	if p := c.raw.prefixes.Load(); p != nil {
		if slices.Contains(*p, tagPrefix) {
			return
		}
		next = slices.Clone(*p)
	}
	next = append(next, tagPrefix)
	c.raw.prefixes.Store(&next)
}

// RawHeaders returns the AMQP encoding of a delivery's header table (its
// body, without the broker's return counts, which stay in d.Headers) when
// the frame filter delivered it as bytes (DeliverRawHeaders); ok is false
// for any other delivery, including one whose own headers imitate it.
func (c *Conn) RawHeaders(d *amqp.Delivery) (table []byte, ok bool) {
	b, isBytes := d.Headers[headerRaw].([]byte)
	if !isBytes || len(b) < len(c.raw.secret) || !bytes.Equal(b[:len(c.raw.secret)], c.raw.secret[:]) {
		return nil, false
	}
	return b[len(c.raw.secret):], true
}
