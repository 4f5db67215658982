// Package amqptest decodes AMQP header tables with amqp091-go itself, for
// tests that must agree with it byte for byte: a scripted server on an
// in-memory pipe delivers messages carrying the tables, and the real client
// reads them.
package amqptest

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

const frameEnd = 0xCE

// DecodeTables returns the header tables amqp091-go decodes from tables
// (each the body of an AMQP field table, without its length prefix), one
// delivery each on one connection. wrap, when set, wraps the client's end
// of the connection (a frame filter under test); consumerTag names the
// consumer the messages are delivered to. An error means amqp091-go closed
// the connection, as it does on a table it cannot decode.
func DecodeTables(tables [][]byte, consumerTag string, wrap func(net.Conn) net.Conn) ([]amqp.Delivery, error) {
	return DecodeMessages(tables, nil, consumerTag, wrap)
}

// DecodeMessages is DecodeTables with a body for each table (bodies[i],
// empty when bodies is shorter), sent in body frames of at most
// BodyFrameMax bytes, so that a body of more than that spans frames.
func DecodeMessages(tables, bodies [][]byte, consumerTag string, wrap func(net.Conn) net.Conn) ([]amqp.Delivery, error) {
	server, client := net.Pipe()
	defer server.Close()
	var clientConn net.Conn = client
	if wrap != nil {
		clientConn = wrap(client)
	}
	done := make(chan error, 1)
	go func() { done <- serve(server, tables, bodies, consumerTag) }()
	conn, err := amqp.Open(clientConn, amqp.Config{
		SASL:   []amqp.Authentication{&amqp.PlainAuth{Username: "guest", Password: "guest"}},
		Locale: "en_US",
	})
	if err != nil {
		_ = server.Close()
		return nil, fmt.Errorf("open: %w (server: %v)", err, <-done)
	}
	defer func() {
		// The scripted server answers no connection.close: end the pipe.
		_ = server.Close()
		_ = conn.Close()
		<-done
	}()
	ch, err := conn.Channel()
	if err != nil {
		return nil, fmt.Errorf("channel: %w", err)
	}
	deliveries, err := ch.Consume("q", consumerTag, true, false, false, false, nil)
	if err != nil {
		return nil, fmt.Errorf("consume: %w", err)
	}
	closed := conn.NotifyClose(make(chan *amqp.Error, 1))
	var out []amqp.Delivery
	timeout := time.After(10 * time.Second)
	for len(out) < len(tables) {
		select {
		case d := <-deliveries:
			out = append(out, d)
		case e := <-closed:
			return out, fmt.Errorf("connection closed: %v", e)
		case err := <-done:
			done <- err // for the deferred wait
			return out, fmt.Errorf("the server ended early: %v", err)
		case <-timeout:
			return out, errors.New("timed out waiting for deliveries")
		}
	}
	return out, nil
}

// BodyFrameMax is the most body bytes DecodeMessages sends in one frame.
const BodyFrameMax = 1000

// serve plays the server: handshake, channel, consume, then one delivery
// per table, with its body from bodies.
func serve(c net.Conn, tables, bodies [][]byte, tag string) error {
	r := bufio.NewReader(c)
	var proto [8]byte
	if _, err := io.ReadFull(r, proto[:]); err != nil {
		return err
	}
	w := bufio.NewWriter(c)
	// connection.start: version 0-9, no properties, PLAIN, en_US.
	start := []byte{0, 9}
	start = binary.BigEndian.AppendUint32(start, 0)
	start = longstr(start, "PLAIN")
	start = longstr(start, "en_US")
	if err := send(w, 1, 0, method(10, 10, start)); err != nil {
		return err
	}
	if err := expect(r, 10, 11); err != nil { // start-ok
		return err
	}
	tune := binary.BigEndian.AppendUint16(nil, 0)
	tune = binary.BigEndian.AppendUint32(tune, 131072)
	tune = binary.BigEndian.AppendUint16(tune, 0)
	if err := send(w, 1, 0, method(10, 30, tune)); err != nil {
		return err
	}
	if err := expect(r, 10, 31); err != nil { // tune-ok
		return err
	}
	if err := expect(r, 10, 40); err != nil { // open
		return err
	}
	if err := send(w, 1, 0, method(10, 41, []byte{0})); err != nil {
		return err
	}
	if err := expect(r, 20, 10); err != nil { // channel.open
		return err
	}
	if err := send(w, 1, 1, method(20, 11, binary.BigEndian.AppendUint32(nil, 0))); err != nil {
		return err
	}
	if err := expect(r, 60, 20); err != nil { // basic.consume
		return err
	}
	if err := send(w, 1, 1, method(60, 21, shortstr(nil, tag))); err != nil {
		return err
	}
	for i, t := range tables {
		deliver := shortstr(nil, tag)
		deliver = binary.BigEndian.AppendUint64(deliver, uint64(i+1))
		deliver = append(deliver, 0)
		deliver = shortstr(deliver, "ex")
		deliver = shortstr(deliver, "rk")
		if err := send(w, 1, 1, method(60, 60, deliver)); err != nil {
			return err
		}
		var body []byte
		if i < len(bodies) {
			body = bodies[i]
		}
		hdr := binary.BigEndian.AppendUint16(nil, 60)
		hdr = binary.BigEndian.AppendUint16(hdr, 0)
		hdr = binary.BigEndian.AppendUint64(hdr, uint64(len(body)))
		hdr = binary.BigEndian.AppendUint16(hdr, 0x2000) // headers only
		hdr = binary.BigEndian.AppendUint32(hdr, uint32(len(t)))
		hdr = append(hdr, t...)
		if err := send(w, 2, 1, hdr); err != nil {
			return err
		}
		for b := body; len(b) > 0; {
			n := min(len(b), BodyFrameMax)
			if err := send(w, 3, 1, b[:n]); err != nil {
				return err
			}
			b = b[n:]
		}
	}
	// Answer nothing more; keep reading until the client closes.
	_, _ = io.Copy(io.Discard, r)
	return nil
}

func method(class, id uint16, args []byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, id)
	return append(p, args...)
}

func send(w *bufio.Writer, typ byte, ch uint16, payload []byte) error {
	f := []byte{typ}
	f = binary.BigEndian.AppendUint16(f, ch)
	f = binary.BigEndian.AppendUint32(f, uint32(len(payload)))
	f = append(append(f, payload...), frameEnd)
	if _, err := w.Write(f); err != nil {
		return err
	}
	return w.Flush()
}

// expect reads frames until a method frame of class and id.
func expect(r *bufio.Reader, class, id uint16) error {
	for {
		var hdr [7]byte
		if _, err := io.ReadFull(r, hdr[:]); err != nil {
			return err
		}
		p := make([]byte, binary.BigEndian.Uint32(hdr[3:])+1)
		if _, err := io.ReadFull(r, p); err != nil {
			return err
		}
		if hdr[0] == 1 && len(p) >= 5 && binary.BigEndian.Uint16(p) == class && binary.BigEndian.Uint16(p[2:]) == id {
			return nil
		}
	}
}

func shortstr(b []byte, s string) []byte { return append(append(b, byte(len(s))), s...) }

func longstr(b []byte, s string) []byte {
	return append(binary.BigEndian.AppendUint32(b, uint32(len(s))), s...)
}

// Entry is one table entry in its AMQP encoding: key, then the field
// value, whose encoding (type byte first) is given.
func Entry(key string, value []byte) []byte {
	return append(shortstr(nil, key), value...)
}

// Str, Long, Table and Array encode field values.
func Str(s string) []byte { return longstr([]byte{'S'}, s) }

// Long encodes an int64.
func Long(n int64) []byte { return binary.BigEndian.AppendUint64([]byte{'l'}, uint64(n)) }

// Table encodes a nested table of the given entries.
func Table(entries ...[]byte) []byte { return container('F', entries) }

// Array encodes an array of the given values.
func Array(values ...[]byte) []byte { return container('A', values) }

// Timestamp encodes Unix seconds.
func Timestamp(sec int64) []byte { return binary.BigEndian.AppendUint64([]byte{'T'}, uint64(sec)) }

func container(typ byte, parts [][]byte) []byte {
	var body []byte
	for _, p := range parts {
		body = append(body, p...)
	}
	return append(binary.BigEndian.AppendUint32([]byte{typ}, uint32(len(body))), body...)
}

// Concat joins table entries into a table body.
func Concat(entries ...[]byte) []byte {
	var b []byte
	for _, e := range entries {
		b = append(b, e...)
	}
	return b
}

// Seeds are header table bodies for fuzz targets: realistic dead letters,
// repeated keys, every field type, nesting and the encoding's special
// cases.
func Seeds() [][]byte {
	death := Table(
		Entry("count", Long(3)),
		Entry("exchange", Str("orders")),
		Entry("queue", Str("orders.work")),
		Entry("reason", Str("rejected")),
		Entry("routing-keys", Array(Str("order.created"))),
		Entry("time", Timestamp(1764300000)),
	)
	all := [][]byte{
		{'b', 0xff}, {'B', 0xff}, {'s', 0x80, 0}, {'u', 0xff, 0xff}, {'I', 0x80, 0, 0, 0}, {'i', 0xff, 0xff, 0xff, 0xff},
		Long(-1), {'f', 0x7f, 0xc0, 0, 0}, {'d', 0x3f, 0xf0, 0, 0, 0, 0, 0, 0}, {'D', 2, 0, 0, 0x30, 0x39},
		{'t', 1}, {'t', 0}, {'V'}, Timestamp(-62167219201), append(binary.BigEndian.AppendUint32([]byte{'x'}, 3), 0, 1, 0xff),
		Str("a\x00b"), Str("\xff\xfe"), Str("<&>\u2028"), Array(), Table(),
	}
	var every [][]byte
	for i, v := range all {
		every = append(every, Entry(fmt.Sprintf("k%02d", i), v))
	}
	return [][]byte{
		{},
		Concat(
			Entry("x-death", Array(death)),
			Entry("x-first-death-exchange", Str("orders")),
			Entry("x-first-death-queue", Str("orders.work")),
			Entry("x-first-death-reason", Str("rejected")),
			Entry("tenant", Str("acme")),
			Entry("attempt", Long(2)),
			Entry("x-exception-message", Str("boom")),
			Entry("x-exception-stacktrace", Str("java.lang.IllegalStateException: boom\n\tat x.y")),
			Entry("x-dlq-id", Long(42)),
			Entry("x-dlq-replay-id", Str("r-1")),
			Entry("x-dlq-replay-count", Long(1)),
		),
		Concat(Entry("a", Long(1)), Entry("b", Str("x")), Entry("a", Str("second"))),
		Concat(Entry("type", Str("int8")), Entry("value", Long(1))),
		Concat(Entry("nested", Table(Entry("type", Str("")), Entry("id", Str("n-1")), Entry("id", Long(7))))),
		Concat(Entry("\xff\x00", Str("bad key")), Entry("t", Table(Entry("\x00", Long(1))))),
		Concat(Entry("NServiceBus.ExceptionInfo.Message", Str("nsb")), Entry("nservicebus.exceptioninfo.message", Str("lower")),
			Entry("NServiceBus.TimeOfFailure", Str("2026-11-28 10:00:00:000000 Z"))),
		Concat(Entry("deep", Array(Array(Array(Table(Entry("x", Array(Str("y"), Long(1))))))))),
		Concat(every...),
	}
}

// DeathSeeds are header table bodies for fuzz targets: death headers of
// every shape broker.ExtractDeath reads (two entries, values of other
// types than RabbitMQ's, elements that are not tables, x-death that is not
// an array, the x-last- and x-first-death- headers alone).
func DeathSeeds() [][]byte {
	e, str, long := Entry, Str, Long
	i32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte{'I'}, n) }
	u32 := func(n uint32) []byte { return binary.BigEndian.AppendUint32([]byte{'i'}, n) }
	bytesOf := func(s string) []byte { return append(binary.BigEndian.AppendUint32([]byte{'x'}, uint32(len(s))), s...) }
	first := Table(e("queue", str("a")), e("reason", str("expired")), e("count", long(2)),
		e("time", Timestamp(1764300000)), e("routing-keys", Array(str("k1"), bytesOf("k2"), long(3))),
		e("original-expiration", str("1000")), e("exchange", str("")))
	second := Table(e("queue", bytesOf("b")), e("reason", str("REJECTED")), e("count", str(" 4 ")),
		e("time", i32(1764200000)), e("routing-keys", str("single")), e("queue", str("b2")))
	odd := Table(e("queue", long(1)), e("reason", str("maxlen")), e("count", []byte{'s', 0, 9}),
		e("time", u32(4000000000)), e("routing-keys", long(1)))
	bytesKey := Table(e("queue", str("c")), e("reason", str("rejected")), e("routing-keys", bytesOf("k")))
	far := Table(e("reason", str("delivery_limit")), e("time", Timestamp(1<<40)), e("count", str("x")),
		e("time", []byte{'s', 0, 1}))
	return [][]byte{
		Concat(e("x-death", Array(first, str("not a table"), second, odd, far))),
		Concat(e("x-death", Array(bytesKey, first))),
		Concat(e("x-death", Array(Table(e("count", long(1))))), e("x-last-death-queue", str("q")),
			e("x-last-death-reason", str("delivery-limit")), e("x-last-death-exchange", bytesOf("ex"))),
		Concat(e("x-death", str("x")), e("x-first-death-queue", str("q1")), e("x-first-death-reason", long(1)),
			e("x-last-death-queue", str("")), e("x-last-death-reason", str(""))),
		Concat(e("x-death", Array()), e("x-first-death-reason", str("expired"))),
		Concat(e("x-death", Array(second, first)), e("x-first-death-queue", str("a")), e("x-first-death-reason", str("expired"))),
	}
}
