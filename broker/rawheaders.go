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
// the whole header table out of the content header and sends its bytes in
// a body frame of their own, in front of the message's body frames (the
// body size grown to match). amqp091-go is left a table of one byte-array
// entry, headerRaw, holding the Conn's secret and the length of the bytes
// in front, plus the broker's return counts as they were (ReturnCount
// reads them). amqp091-go then copies the bytes with the body instead of
// building maps, and the consumer splits them off and reads them with
// RawTable (RawHeaders).
//
// Which delivery a content header belongs to is said by the method frame
// just before it on the same channel: basic.deliver carries the consumer
// tag; basic.get-ok and basic.return carry none, and their headers are left
// alone. A table amqp091-go cannot decode is still replaced by a token
// (framefilter.go) whichever consumer gets it.
//
// The secret makes the entry unforgeable: a publisher's own header of the
// same name is inside the bytes, never at the top, and a delivery the
// filter did not rewrite (its table would not fit one body frame) is read
// the ordinary way. The length in the entry is only trusted with the
// secret, and never past the body.

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
// header table taken out, and after it a body frame carrying that table's
// bytes ahead of the message's own body; ok is false when the frame has no
// table or the table's body frame would not fit frame_max.
//
// In front of the body, amqp091-go copies the table's bytes twice (a body
// frame, then the body), where a table entry costs four copies and a map
// (readTable reads the table as a string, then a buffer, then the entry).
// The header table left holds one byte-array entry, headerRaw: the secret
// and the table's length (the marker RawHeaders checks), then the broker's
// return counts as they were.
func (r *rawDeliveries) rewrite(frame, dst []byte) (out []byte, ok bool) {
	off, n, ok := headerTable(frame)
	if !ok {
		return dst, false
	}
	table := frame[off : off+n]
	kept, counts, ok := returnCountsSize(table)
	// The content header: body size grown by the table's bytes, the table
	// replaced by the marker and the counts (longer than a table of a few
	// bytes, so both frames are checked against frame_max).
	marker := 1 + len(headerRaw) + 1 + 4 + len(r.cfg.secret) + 4
	header := len(frame) - n + marker + counts
	if !ok || kept == 0 || r.frameMax > 0 && (8+kept > r.frameMax || header > r.frameMax) {
		return dst, false
	}
	start := len(dst)
	dst = append(dst, frame[:3]...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(frame)-8-n+marker+counts))
	dst = append(dst, frame[7:11]...) // class-id, weight
	dst = binary.BigEndian.AppendUint64(dst, binary.BigEndian.Uint64(frame[11:19])+uint64(kept))
	dst = append(dst, frame[19:off-4]...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(marker+counts))
	dst = append(dst, byte(len(headerRaw)))
	dst = append(dst, headerRaw...)
	dst = append(dst, 'x')
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(r.cfg.secret)+4))
	dst = append(dst, r.cfg.secret[:]...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(kept))
	dst = appendEntries(dst, table, true)
	dst = append(dst, frame[off+n:]...)
	if len(dst)-start != header {
		return dst[:start], false // not reached: the sizes are the walk's
	}
	// The body frame with the table, on the same channel.
	dst = append(dst, frameTypeBody, frame[1], frame[2])
	dst = binary.BigEndian.AppendUint32(dst, uint32(kept))
	dst = appendEntries(dst, table, false)
	return append(dst, frameEndByte), true
}

// returnCountsSize walks a decodable table's top-level entries: kept is
// the size of those that are not the broker's return counts, counts the
// size of those that are.
func returnCountsSize(table []byte) (kept, counts int, ok bool) {
	for b := table; len(b) > 0; {
		klen := int(b[0])
		if 1+klen > len(b) {
			return 0, 0, false
		}
		rest, err := skipFieldShallow(b[1+klen:])
		if err != nil {
			return 0, 0, false // not reached: the table is decodable
		}
		if isReturnCount(string(b[1 : 1+klen])) {
			counts += len(b) - len(rest)
		} else {
			kept += len(b) - len(rest)
		}
		b = rest
	}
	return kept, counts, true
}

// appendEntries appends to dst the top-level entries of table that are
// the broker's return counts (counts) or the others (!counts), in order.
func appendEntries(dst, table []byte, counts bool) []byte {
	for b := table; len(b) > 0; {
		klen := int(b[0])
		rest, _ := skipFieldShallow(b[1+klen:]) // walked by returnCountsSize
		if isReturnCount(string(b[1:1+klen])) == counts {
			dst = append(dst, b[:len(b)-len(rest)]...)
		}
		b = rest
	}
	return dst
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
// body, without the broker's return counts, which stay in the headers) and
// the message's own body, when the frame filter delivered the table as
// bytes in front of the body (DeliverRawHeaders); headers and body are the
// delivery's. ok is false for any other delivery, including one whose own
// headers imitate the marker: its body is then the message's.
func (c *Conn) RawHeaders(headers amqp.Table, body []byte) (table, message []byte, ok bool) {
	b, isBytes := headers[headerRaw].([]byte)
	if !isBytes || len(b) != len(c.raw.secret)+4 || !bytes.Equal(b[:len(c.raw.secret)], c.raw.secret[:]) {
		return nil, body, false
	}
	n := binary.BigEndian.Uint32(b[len(c.raw.secret):])
	if uint64(n) > uint64(len(body)) {
		return nil, body, false // not reached: the filter put them there
	}
	return body[:n:n], body[n:], true
}
