package broker

import (
	"bufio"
	"cmp"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/url"
	"os"
	"strconv"
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
	frameTypeHeader = 2
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
// AMQP encoding) of a delivery received on c whose table the frame filter
// replaced because amqp091-go cannot decode it. ok is false for any other
// delivery, including one that carries a HeaderUndecodable header of its
// own: only a token this Conn handed out is found.
func (c *Conn) UndecodableHeaders(d *amqp.Delivery) (table []byte, ok bool) {
	token, isToken := d.Headers[HeaderUndecodable].(int64)
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
	r       *bufio.Reader
	started bool
	raw     bool   // not AMQP frames (a protocol mismatch): pass everything
	pending []byte // bytes to hand out before reading on
	left    int    // bytes of the current frame to pass straight through
	buf     []byte // reused for header frames
}

func newFrameFilter(c net.Conn, tables *undecodableTables) *frameFilter {
	return &frameFilter{Conn: c, tables: tables, r: bufio.NewReaderSize(c, 64<<10)}
}

func (f *frameFilter) Read(p []byte) (int, error) {
	for {
		if len(f.pending) > 0 {
			n := copy(p, f.pending)
			f.pending = f.pending[n:]
			return n, nil
		}
		if f.raw {
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

// next reads the next frame's header and sets up how to pass it on.
func (f *frameFilter) next() error {
	if !f.started {
		f.started = true
		// A server that does not speak our protocol version answers with
		// its protocol header ("AMQP...") instead of a frame.
		if b, err := f.r.Peek(1); err == nil && b[0] == 'A' {
			f.raw = true
			return nil
		}
	}
	var hdr [7]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return err
	}
	size := int(binary.BigEndian.Uint32(hdr[3:7]))
	if hdr[0] != frameTypeHeader || size > maxFilteredFrame {
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
	if out, ok := rewriteHeaderFrame(frame, f.tables); ok {
		frame = out
	}
	f.pending = frame
	return nil
}

// rewriteHeaderFrame returns frame with its header table replaced when
// amqp091-go could not decode it, the original kept in tables; ok is false
// when it can stay as it is (or is malformed in a way the filter leaves for
// amqp091-go to report).
func rewriteHeaderFrame(frame []byte, tables *undecodableTables) (out []byte, ok bool) {
	if frame[len(frame)-1] != frameEndByte {
		return nil, false
	}
	payload := frame[7 : len(frame)-1]
	// class-id, weight, body size, property flags.
	if len(payload) < 14 {
		return nil, false
	}
	flags := binary.BigEndian.Uint16(payload[12:14])
	if flags&flagHeaders == 0 {
		return nil, false
	}
	off := 14
	for _, fl := range []uint16{flagContentType, flagContentEnc} {
		if flags&fl != 0 {
			if off >= len(payload) {
				return nil, false
			}
			off += 1 + int(payload[off])
		}
	}
	if off+4 > len(payload) {
		return nil, false
	}
	n := int(binary.BigEndian.Uint32(payload[off : off+4]))
	if n < 0 || off+4+n > len(payload) {
		return nil, false
	}
	table := payload[off+4 : off+4+n]
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

	newPayload := make([]byte, 0, len(payload)-n+len(repl))
	newPayload = append(newPayload, payload[:off]...)
	newPayload = binary.BigEndian.AppendUint32(newPayload, uint32(len(repl)))
	newPayload = append(newPayload, repl...)
	newPayload = append(newPayload, payload[off+4+n:]...)

	out = make([]byte, 0, 7+len(newPayload)+1)
	out = append(out, frame[:3]...)
	out = binary.BigEndian.AppendUint32(out, uint32(len(newPayload)))
	out = append(out, newPayload...)
	return append(out, frameEndByte), true
}

var errUndecodable = errors.New("undecodable")

// tableDecodable reports whether amqp091-go can decode the table body b
// (without its length prefix) found at depth.
func tableDecodable(b []byte, depth int) bool {
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

func arrayDecodable(b []byte, depth int) bool {
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
func skipField(b []byte, depth int) ([]byte, error) {
	if len(b) == 0 {
		return nil, errUndecodable
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
			return nil, errUndecodable
		}
		return b[fixed:], nil
	}
	switch typ {
	case 'S', 'x', 'A', 'F':
		if len(b) < 4 {
			return nil, errUndecodable
		}
		n := int64(binary.BigEndian.Uint32(b[:4]))
		if n > int64(len(b)-4) {
			return nil, errUndecodable
		}
		body, rest := b[4:4+n], b[4+n:]
		switch {
		case typ == 'F' && !tableDecodable(body, depth+1):
			return nil, errUndecodable
		case typ == 'A' && !arrayDecodable(body, depth+1):
			return nil, errUndecodable
		}
		return rest, nil
	}
	return nil, errUndecodable
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
func skipFieldShallow(b []byte) ([]byte, error) {
	if len(b) > 0 && (b[0] == 'F' || b[0] == 'A') {
		if len(b) < 5 {
			return nil, errUndecodable
		}
		n := int64(binary.BigEndian.Uint32(b[1:5]))
		if n > int64(len(b)-5) {
			return nil, errUndecodable
		}
		return b[5+n:], nil
	}
	return skipField(b, 0)
}

// dialFiltered dials like amqp.DialConfig with a frameFilter between the
// socket and amqp091-go, and a coalescingConn over both that gathers the
// writes. For amqps it does the TLS handshake itself, so the filter reads
// plain frames, with cfg.TLSClientConfig, or else the URL's own TLS
// parameters (cacertfile, certfile, keyfile, server_name_indication),
// read here as amqp091-go would. The filter keeps the tables it replaces
// in tables.
func dialFiltered(rawURL string, cfg amqp.Config, tables *undecodableTables) (*amqp.Connection, error) {
	uri, err := amqp.ParseURI(rawURL)
	if err != nil {
		return nil, err
	}
	timeout := 30 * time.Second
	if uri.ConnectionTimeout > 0 {
		timeout = time.Duration(uri.ConnectionTimeout) * time.Millisecond
	}
	var tlsCfg *tls.Config
	dialURL := rawURL
	if uri.Scheme == "amqps" {
		if tlsCfg, err = uriTLS(uri, cfg.TLSClientConfig); err != nil {
			return nil, err
		}
		cfg.TLSClientConfig = nil
		// amqp091-go must not wrap the connection in TLS a second time:
		// it gets an amqp:// URL with the amqps port spelt out, and the
		// rest of the URL (vhost, query parameters) as it was.
		u, err := url.Parse(rawURL)
		if err != nil {
			return nil, err
		}
		u.Scheme = "amqp"
		u.Host = net.JoinHostPort(uri.Host, strconv.Itoa(uri.Port))
		dialURL = u.String()
	}
	cfg.Dial = func(network, addr string) (net.Conn, error) {
		c, err := net.DialTimeout(network, addr, timeout)
		if err != nil {
			return nil, err
		}
		// The handshake has a deadline; amqp091-go clears it once open.
		if err := c.SetDeadline(time.Now().Add(timeout)); err != nil {
			_ = c.Close()
			return nil, err
		}
		if tlsCfg != nil {
			tc := tls.Client(c, tlsCfg)
			if err := tc.Handshake(); err != nil {
				_ = c.Close()
				return nil, err
			}
			c = tc
		}
		return newCoalescingConn(newFrameFilter(c, tables), coalesceDelay), nil
	}
	return amqp.DialConfig(dialURL, cfg)
}

// uriTLS is the TLS configuration of an amqps connection: base (cloned),
// or the URL's parameters; the server name defaults to the URL's host.
func uriTLS(uri amqp.URI, base *tls.Config) (*tls.Config, error) {
	if base != nil {
		c := base.Clone()
		if c.ServerName == "" {
			c.ServerName = uri.Host
		}
		return c, nil
	}
	c := &tls.Config{ServerName: cmp.Or(uri.ServerName, uri.Host), MinVersion: tls.VersionTLS12}
	if uri.CACertFile != "" {
		pem, err := os.ReadFile(uri.CACertFile)
		if err != nil {
			return nil, fmt.Errorf("broker: cacertfile: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("broker: cacertfile %s holds no PEM certificate", uri.CACertFile)
		}
	}
	if uri.CertFile != "" || uri.KeyFile != "" {
		cert, err := tls.LoadX509KeyPair(uri.CertFile, uri.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("broker: certfile and keyfile: %w", err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}
