package broker

import (
	"bytes"
	"encoding/binary"
	"io"
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Test encodings of AMQP fields, as RabbitMQ writes them.
func shortstrEnc(s string) []byte { return append([]byte{byte(len(s))}, s...) }

func tableEnc(entries ...[]byte) []byte { return bytes.Join(entries, nil) }

func entry(key string, field []byte) []byte { return append(shortstrEnc(key), field...) }

func fieldTable(body []byte) []byte {
	return append(binary.BigEndian.AppendUint32([]byte{'F'}, uint32(len(body))), body...)
}

func fieldLong(n int64) []byte { return binary.BigEndian.AppendUint64([]byte{'l'}, uint64(n)) }

func nested(levels int) []byte {
	body := entry("leaf", append(binary.BigEndian.AppendUint32([]byte{'S'}, 1), 'x'))
	for range levels {
		body = entry("n", fieldTable(body))
	}
	return body
}

// headerFrame builds a basic content header frame with a content type, a
// content encoding, the given header table and a message id.
func headerFrame(table []byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, 60) // class basic
	p = binary.BigEndian.AppendUint16(p, 0)
	p = binary.BigEndian.AppendUint64(p, 42) // body size
	p = binary.BigEndian.AppendUint16(p, flagContentType|flagContentEnc|flagHeaders|0x0100)
	p = append(p, shortstrEnc("application/json")...)
	p = append(p, shortstrEnc("gzip")...)
	p = binary.BigEndian.AppendUint32(p, uint32(len(table)))
	p = append(p, table...)
	p = append(p, shortstrEnc("msg-1")...) // message-id
	f := []byte{frameTypeHeader, 0, 1}
	f = binary.BigEndian.AppendUint32(f, uint32(len(p)))
	f = append(f, p...)
	return append(f, frameEndByte)
}

func TestTableDecodableMatchesTheClientLimits(t *testing.T) {
	require.True(t, tableDecodable(nested(32), 0), "32 nested tables: amqp091-go reads them")
	require.False(t, tableDecodable(nested(33), 0), "33: amqp091-go refuses")
	var wide, wider []byte
	for i := range clientMaxElements + 1 {
		e := entry("k", fieldLong(int64(i)))
		if i < clientMaxElements {
			wide = append(wide, e...)
		}
		wider = append(wider, e...)
	}
	require.True(t, tableDecodable(wide, 0))
	require.False(t, tableDecodable(wider, 0))
	require.False(t, tableDecodable(entry("odd", []byte{'?', 1}), 0), "an unknown field type")
	require.False(t, tableDecodable(entry("cut", []byte{'l', 1, 2}), 0), "a truncated value")
}

func TestRewriteHeaderFrame(t *testing.T) {
	tables := newUndecodableTables()
	ok := headerFrame(tableEnc(entry("tenant", append(binary.BigEndian.AppendUint32([]byte{'S'}, 4), "acme"...))))
	_, changed := rewriteHeaderFrame(ok, tables)
	require.False(t, changed, "a decodable table passes untouched")

	deep := nested(40)
	first := headerFrame(deep)
	// A quorum queue adds x-delivery-count on redelivery.
	again := headerFrame(tableEnc(entry("x-delivery-count", fieldLong(2)), deep))
	var kept [][]byte
	for i, f := range [][]byte{first, again} {
		out, changed := rewriteHeaderFrame(f, tables)
		require.True(t, changed)
		require.Less(t, len(out), len(f), "the rewritten frame is shorter, so it fits frame_max")
		props := out[7+14:]
		require.Equal(t, "application/json", string(props[1:1+props[0]]), "the properties before the headers are kept")
		require.True(t, bytes.HasSuffix(out, append(shortstrEnc("msg-1"), frameEndByte)), "and those after them")
		off := 14 + 1 + len("application/json") + 1 + len("gzip")
		payload := out[7 : len(out)-1]
		n := binary.BigEndian.Uint32(payload[off:])
		table := payload[off+4 : off+4+int(n)]
		require.True(t, tableDecodable(table, 0))
		require.True(t, bytes.HasPrefix(table, shortstrEnc(HeaderUndecodable)))
		tok := int64(binary.BigEndian.Uint64(table[1+len(HeaderUndecodable)+1:]))
		raw, found := tables.take(tok)
		require.True(t, found)
		kept = append(kept, raw)
		if i == 1 {
			require.Contains(t, string(table), "x-delivery-count", "the return count stays readable")
		}
	}
	require.Equal(t, deep, kept[0], "the original table, byte for byte")
	require.Equal(t, kept[0], kept[1], "a redelivery keeps the same bytes, without the return count")
}

// TestFrameFilterStream: frames of every kind pass through in order, split
// however the reader asks for them, and only the undecodable header changes.
func TestFrameFilterStream(t *testing.T) {
	method := append(binary.BigEndian.AppendUint32([]byte{1, 0, 1}, 4), 0, 60, 0, 60, frameEndByte)
	body := append(binary.BigEndian.AppendUint32([]byte{3, 0, 1}, 3), 'a', 'b', 'c', frameEndByte)
	heartbeat := []byte{8, 0, 0, 0, 0, 0, 0, frameEndByte}
	good := headerFrame(entry("k", fieldLong(1)))
	bad := headerFrame(nested(40))
	var in bytes.Buffer
	for _, f := range [][]byte{method, good, body, heartbeat, method, bad, body} {
		in.Write(f)
	}
	server, client := net.Pipe()
	go func() {
		_, _ = server.Write(in.Bytes())
		_ = server.Close()
	}()
	tables := newUndecodableTables()
	f := newFrameFilter(client, tables, newRawConfig().forDial(0))
	require.NoError(t, f.SetReadDeadline(time.Now().Add(10*time.Second)))
	var out bytes.Buffer
	buf := make([]byte, 5) // small reads split every frame
	for {
		n, err := f.Read(buf)
		out.Write(buf[:n])
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
	}
	rewritten, _ := rewriteHeaderFrame(bad, newUndecodableTables())
	var want bytes.Buffer
	for _, fr := range [][]byte{method, good, body, heartbeat, method} {
		want.Write(fr)
	}
	got := out.Bytes()
	require.True(t, bytes.HasPrefix(got, want.Bytes()), "frames before the undecodable header are unchanged")
	rest := got[want.Len():]
	require.Equal(t, len(rewritten)+len(body), len(rest))
	require.Equal(t, rewritten[:7+14], rest[:7+14], "the rewritten header frame follows")
	require.Equal(t, body, rest[len(rewritten):], "then the body frame")
}
