package broker

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"sync"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// Headers amqp091-go cannot decode.
//
// amqp091-go refuses a header table nested deeper than 32 levels, holding
// more than 8192 entries in one table or array, or carrying a field type
// it does not know, by closing the whole connection (501/502 "invalid field
// or value inside of a frame"). RabbitMQ accepts such headers, so one such
// dead letter would close dlq's connection on every delivery: every
// consumer, publisher and the control queue with it, forever, while the
// message is redelivered again and again.
//
// frameFilter sits between the socket and amqp091-go. It passes every
// frame through untouched except a content header whose header table
// amqp091-go would refuse: that table is replaced by one amqp091-go reads,
// {HeaderUndecodable: token}, plus the broker's return counts
// (x-delivery-count, x-acquired-count) when the original had them, and the
// original table's bytes (without those counts, so a redelivery has the
// same bytes) are kept under the token in the undecodable tables of the
// Conn that dialled the connection. The consumer takes them back from that
// Conn (Conn.UndecodableHeaders) and stores the message raw and flagged,
// with those bytes. The rewritten table is always shorter than one
// amqp091-go refuses, so the frame still fits frame_max.

// HeaderUndecodable replaces a header table amqp091-go cannot decode; its
// value is the AMQP encoding of the original table (in a stored message)
// or, between frameFilter and Conn.UndecodableHeaders, a token for it.
const HeaderUndecodable = "x-dlq-undecodable-headers"

// amqp091-go's limits (read.go: maxFieldDepth, maxContainerElements).
const (
	clientMaxDepth    = 32
	clientMaxElements = 8192
)

const (
	frameTypeMethod = 1
	frameTypeHeader = 2
	frameTypeBody   = 3
	frameEndByte    = 0xCE
	// maxFilteredFrame bounds the frames the filter reads whole; a larger
	// size is no frame RabbitMQ sends (frame_max is 128 KiB by default) and
	// is passed on for amqp091-go to refuse.
	maxFilteredFrame = 16 << 20
	flagContentType  = 0x8000
	flagContentEnc   = 0x4000
	flagHeaders      = 0x2000
)

// undecodableTables holds the original header tables a Conn's frame
// filters replaced, by token, until the delivery's consumer takes them.
// Entries a delivery never collected (its channel died first) expire.
type undecodableTables struct {
	mu sync.Mutex
	m  map[int64]undecodableEntry
}

type undecodableEntry struct {
	table []byte
	at    time.Time
}

const undecodableTTL = time.Hour

func newUndecodableTables() *undecodableTables {
	return &undecodableTables{m: map[int64]undecodableEntry{}}
}

func (u *undecodableTables) keep(table []byte) int64 {
	u.mu.Lock()
	defer u.mu.Unlock()
	now := time.Now()
	for k, e := range u.m {
		if now.Sub(e.at) > undecodableTTL {
			delete(u.m, k)
		}
	}
	token := rand.Int64()
	u.m[token] = undecodableEntry{table: table, at: now}
	return token
}

// take returns and forgets the table kept under token.
func (u *undecodableTables) take(token int64) ([]byte, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	e, ok := u.m[token]
	delete(u.m, token)
	return e.table, ok
}

// UndecodableHeaders returns, and forgets, the original header table (its
// AMQP encoding) of a delivery received on c (headers are its headers) whose table the frame filter
// replaced because amqp091-go cannot decode it. ok is false for any other
// delivery, including one that carries a HeaderUndecodable header of its
// own: only a token this Conn handed out is found.
func (c *Conn) UndecodableHeaders(headers amqp.Table) (table []byte, ok bool) {
	token, isToken := headers[HeaderUndecodable].(int64)
	if !isToken {
		return nil, false
	}
	return c.undecodable.take(token)
}

// UndecodableError is the conversion error of a message stored raw because
// amqp091-go cannot decode its header table of n bytes.
func UndecodableError(n int) error {
	return fmt.Errorf("the AMQP client cannot decode this message's headers "+
		"(tables or arrays nested deeper than %d levels, more than %d entries in one, or an unknown field type); "+
		"stored raw: their AMQP encoding (%d bytes) is kept, base64, in header %s", clientMaxDepth, clientMaxElements, n, HeaderUndecodable)
}

// frameFilter wraps an AMQP connection's socket (after TLS); see above.
type frameFilter struct {
	net.Conn
	tables  *undecodableTables // where replaced tables are kept
	raw     rawDeliveries      // which header tables go to the consumer as bytes
	r       *bufio.Reader
	started bool
	through bool   // not AMQP frames (a protocol mismatch): pass everything
	pending []byte // bytes to hand out before reading on
	left    int    // bytes of the current frame to pass straight through
	buf     []byte // reused for method and header frames
	out     []byte // reused for rewritten header frames
}

func newFrameFilter(c net.Conn, tables *undecodableTables, raw rawDeliveries) *frameFilter {
	return &frameFilter{Conn: c, tables: tables, raw: raw, r: bufio.NewReaderSize(c, 64<<10)}
}

func (f *frameFilter) Read(p []byte) (int, error) {
	for {
		if len(f.pending) > 0 {
			n := copy(p, f.pending)
			f.pending = f.pending[n:]
			return n, nil
		}
		if f.through {
			return f.r.Read(p)
		}
		if f.left > 0 {
			n, err := f.r.Read(p[:min(len(p), f.left)])
			f.left -= n
			return n, err
		}
		if err := f.next(); err != nil {
			return 0, err
		}
	}
}

// next reads the next frame's header and sets up how to pass it on:
// method frames (which say whose delivery the next content header is) and
// content headers are read whole, everything else passed straight through.
func (f *frameFilter) next() error {
	if !f.started {
		f.started = true
		// A server that does not speak our protocol version answers with
		// its protocol header ("AMQP...") instead of a frame.
		if b, err := f.r.Peek(1); err == nil && b[0] == 'A' {
			f.through = true
			return nil
		}
	}
	var hdr [7]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint32(hdr[3:7]))
	if hdr[0] != frameTypeHeader && hdr[0] != frameTypeMethod || size > maxFilteredFrame {
		f.pending = append(f.buf[:0], hdr[:]...)
		f.left = size + 1
		return nil
	}
	need := 7 + size + 1
	if cap(f.buf) < need {
		f.buf = make([]byte, need)
	}
	frame := f.buf[:need]
	copy(frame, hdr[:])
	if _, err := io.ReadFull(f.r, frame[7:]); err != nil {
		return err
	}
	if hdr[0] == frameTypeMethod {
		f.raw.method(frame)
		f.pending = frame
		return nil
	}
	asBytes := f.raw.header(frame)
	if out, ok := rewriteHeaderFrame(frame, f.tables); ok {
		frame = out
	} else if asBytes {
		if f.out, ok = f.raw.rewrite(frame, f.out[:0]); ok {
			frame = f.out
		}
	}
	f.pending = frame
	return nil
}

// headerTable locates the header table in a content header frame: the
// table body is frame[off:off+n]; ok is false when the frame has none or
// is malformed in a way the filter leaves for amqp091-go to report.
func headerTable(frame []byte) (off, n int, ok bool) {
	if frame[len(frame)-1] != frameEndByte {
		return 0, 0, false
	}
	payload := frame[7 : len(frame)-1]
	// class-id, weight, body size, property flags.
	if len(payload) < 14 {
		return 0, 0, false
	}
	flags := binary.BigEndian.Uint16(payload[12:14])
	if flags&flagHeaders == 0 {
		return 0, 0, false
	}
	off = 14
	for _, fl := range []uint16{flagContentType, flagContentEnc} {
		if flags&fl != 0 {
			if off >= len(payload) {
				return 0, 0, false
			}
			off += 1 + int(payload[off])
		}
	}
	if off+4 > len(payload) {
		return 0, 0, false
	}
	n = int(binary.BigEndian.Uint32(payload[off : off+4]))
	if n < 0 || off+4+n > len(payload) {
		return 0, 0, false
	}
	return 7 + off + 4, n, true
}

// replaceTable returns frame with the header table at frame[off:off+n]
// replaced by table, appended to dst.
func replaceTable(dst, frame []byte, off, n int, table []byte) []byte {
	size := len(frame) - 8 - n + len(table)
	dst = append(dst, frame[:3]...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(size))
	dst = append(dst, frame[7:off-4]...)
	dst = binary.BigEndian.AppendUint32(dst, uint32(len(table)))
	dst = append(dst, table...)
	return append(dst, frame[off+n:]...)
}

// rewriteHeaderFrame returns frame with its header table replaced when
// amqp091-go could not decode it, the original kept in tables; ok is false
// when it can stay as it is (or is malformed in a way the filter leaves for
// amqp091-go to report).
func rewriteHeaderFrame(frame []byte, tables *undecodableTables) (out []byte, ok bool) {
	off, n, ok := headerTable(frame)
	if !ok {
		return nil, false
	}
	table := frame[off : off+n]
	if tableDecodable(table, 0) {
		return nil, false
	}
	kept, counts := splitReturnCounts(table)
	token := tables.keep(kept)

	repl := make([]byte, 0, 64+len(counts))
	repl = append(repl, byte(len(HeaderUndecodable)))
	repl = append(repl, HeaderUndecodable...)
	repl = append(repl, 'l')
	repl = binary.BigEndian.AppendUint64(repl, uint64(token))
	repl = append(repl, counts...)
	return replaceTable(make([]byte, 0, len(frame)-n+len(repl)), frame, off, n, repl), true
}

var errUndecodable = errors.New("undecodable")

// amqpBytes is the AMQP encoding as the frame filter reads it ([]byte) or
// as the consumer walks it (string, so keys and values are substrings).
type amqpBytes interface{ ~string | ~[]byte }

// be32 reads a big-endian uint32 from the first four bytes of b.
func be32[T amqpBytes](b T) uint32 {
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

// tableDecodable reports whether amqp091-go can decode the table body b
// (without its length prefix) found at depth.
func tableDecodable[T amqpBytes](b T, depth int) bool {
	if depth > clientMaxDepth {
		return false
	}
	entries := 0
	for len(b) > 0 {
		klen := int(b[0])
		if 1+klen > len(b) {
			return false
		}
		b = b[1+klen:]
		var err error
		if b, err = skipField(b, depth); err != nil {
			return false
		}
		if entries++; entries > clientMaxElements {
			return false
		}
	}
	return true
}

func arrayDecodable[T amqpBytes](b T, depth int) bool {
	if depth > clientMaxDepth {
		return false
	}
	elems := 0
	for len(b) > 0 {
		var err error
		if b, err = skipField(b, depth); err != nil {
			return false
		}
		if elems++; elems > clientMaxElements {
			return false
		}
	}
	return true
}

// skipField checks one field value (type byte first) as amqp091-go reads
// it at depth and returns what follows it.
func skipField[T amqpBytes](b T, depth int) (T, error) {
	var none T
	if len(b) == 0 {
		return none, errUndecodable
	}
	typ, b := b[0], b[1:]
	fixed := -1
	switch typ {
	case 'V':
		fixed = 0
	case 't', 'B', 'b':
		fixed = 1
	case 's', 'u':
		fixed = 2
	case 'I', 'i', 'f':
		fixed = 4
	case 'D':
		fixed = 5
	case 'l', 'd', 'T':
		fixed = 8
	}
	if fixed >= 0 {
		if len(b) < fixed {
			return none, errUndecodable
		}
		return b[fixed:], nil
	}
	switch typ {
	case 'S', 'x', 'A', 'F':
		if len(b) < 4 {
			return none, errUndecodable
		}
		n := int64(be32(b))
		if n > int64(len(b)-4) {
			return none, errUndecodable
		}
		body, rest := b[4:4+n], b[4+n:]
		switch {
		case typ == 'F' && !tableDecodable(body, depth+1):
			return none, errUndecodable
		case typ == 'A' && !arrayDecodable(body, depth+1):
			return none, errUndecodable
		}
		return rest, nil
	}
	return none, errUndecodable
}

// splitReturnCounts separates the broker's return counts from the other
// top-level entries of table: kept is the table's bytes without them, and
// counts their entries, which stay readable in the replacement table. The
// table's entries may be undecodable, so an entry that cannot be walked
// ends the split and everything from it on is kept.
func splitReturnCounts(table []byte) (kept, counts []byte) {
	kept = make([]byte, 0, len(table))
	b := table
	for len(b) > 0 {
		start := b
		klen := int(b[0])
		if 1+klen > len(b) {
			break
		}
		key := string(b[1 : 1+klen])
		rest, err := skipFieldShallow(b[1+klen:])
		if err != nil {
			break
		}
		entry := start[:len(start)-len(rest)]
		if isReturnCount(key) {
			counts = append(counts, entry...)
		} else {
			kept = append(kept, entry...)
		}
		b = rest
	}
	return append(kept, b...), counts
}

// skipFieldShallow skips one field without checking what it nests.
func skipFieldShallow[T amqpBytes](b T) (T, error) {
	if len(b) > 0 && (b[0] == 'F' || b[0] == 'A') {
		if len(b) < 5 {
			var none T
			return none, errUndecodable
		}
		n := int64(be32(b[1:5]))
		if n > int64(len(b)-5) {
			var none T
			return none, errUndecodable
		}
		return b[5+n:], nil
	}
	return skipField(b, 0)
}
