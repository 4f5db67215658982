package broker

import (
	"bytes"
	"encoding/binary"
	"net"
	"reflect"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/amqptest"
)

// FuzzRawTable: for every table amqp091-go decodes, RawTable gives the
// same JSON (AppendHeadersJSON of amqp091-go's table), the same values for
// every key, the same extracted headers and the same death (ExtractDeath);
// and the frame filter hands a raw consumer exactly those bytes, the
// return counts left in the table.
func FuzzRawTable(f *testing.F) {
	for _, s := range append(amqptest.Seeds(), amqptest.DeathSeeds()...) {
		f.Add(s)
		f.Add(append(amqptest.Entry("x-delivery-count", amqptest.Long(2)), s...))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		if !tableDecodable(in, 0) {
			return
		}
		ref := clientDecode(t, in, nil)
		rt, err := ParseRawTable(in)
		if err != nil {
			t.Fatalf("ParseRawTable refuses a decodable table: %v", err)
		}
		want, err := AppendHeadersJSON(nil, ref)
		if err != nil {
			t.Fatalf("encode amqp091-go's table: %v", err)
		}
		if got := rt.AppendJSON(nil); !bytes.Equal(got, want) {
			t.Fatalf("JSON differs:\nraw  %s\namqp %s", got, want)
		}
		if rt.Len() != len(ref) {
			t.Fatalf("%d entries, amqp091-go has %d", rt.Len(), len(ref))
		}
		for i := range rt.Len() {
			k, v := rt.Entry(i)
			if i > 0 {
				if prev, _ := rt.Entry(i - 1); prev >= k {
					t.Fatalf("keys out of order: %q, %q", prev, k)
				}
			}
			if w, ok := ref[k]; !ok || !sameValue(v.Decode(), w) {
				t.Fatalf("key %q: raw %#v, amqp091-go %#v", k, v.Decode(), w)
			}
			if g, ok := rt.Get(k); !ok || g != v {
				t.Fatalf("Get(%q) misses", k)
			}
		}
		if rt.PlainJSON() != PlainJSONTable(ref) {
			t.Fatalf("PlainJSON %v, PlainJSONTable %v", rt.PlainJSON(), PlainJSONTable(ref))
		}
		if !sameValue(rt.Table(IsExtractedHeader), pick(ref, IsExtractedHeader)) {
			t.Fatal("extracted headers differ")
		}
		if got, want := ExtractDeathRaw(rt), ExtractDeath(ref); !reflect.DeepEqual(got, want) {
			t.Fatalf("death differs:\nraw  %+v\namqp %+v", got, want)
		}

		// Through the filter, to a raw consumer: the table's bytes in front
		// of the body (empty, or spanning body frames), split off again.
		cfg := newRawConfig()
		c := &Conn{raw: cfg}
		c.DeliverRawHeaders("dlq-x-")
		var body []byte
		if len(in)%2 == 1 {
			body = bytes.Repeat([]byte{byte(len(in)), 0xab}, amqptest.BodyFrameMax)
		}
		ds, err := amqptest.DecodeMessages([][]byte{in}, [][]byte{body}, "dlq-x-q-0", func(nc net.Conn) net.Conn {
			return newFrameFilter(nc, newUndecodableTables(), cfg.forDial(0))
		})
		if err != nil {
			t.Fatalf("through the filter: %v", err)
		}
		got := ds[0].Headers
		table, message, ok := c.RawHeaders(got, ds[0].Body)
		if len(WithoutReturnCounts(ref)) == 0 {
			// Nothing but return counts: nothing goes in front of the body.
			if ok || !bytes.Equal(message, body) {
				t.Fatalf("a table of return counts only: raw %v, body of %d bytes, want %d", ok, len(message), len(body))
			}
		} else {
			if !ok {
				t.Fatalf("no raw table in %#v", got)
			}
			if !bytes.Equal(message, body) {
				t.Fatalf("the message's body: %d bytes, want %d", len(message), len(body))
			}
			rt2, err := ParseRawTable(table)
			if err != nil {
				t.Fatal(err)
			}
			want, _ = AppendHeadersJSON(nil, WithoutReturnCounts(ref))
			if g := rt2.AppendJSON(nil); !bytes.Equal(g, want) {
				t.Fatalf("filtered JSON differs:\nraw  %s\nwant %s", g, want)
			}
		}
		for _, k := range []string{"x-delivery-count", "x-acquired-count"} {
			if !sameValue(got[k], ref[k]) {
				t.Fatalf("return count %s: %#v, want %#v", k, got[k], ref[k])
			}
		}
	})
}

func pick(t amqp.Table, keep func(string) bool) amqp.Table {
	out := amqp.Table{}
	for k, v := range t {
		if keep(k) {
			out[k] = v
		}
	}
	return out
}

// clientDecode is the header table amqp091-go decodes from in, delivered
// to consumer dlq-x-q-0.
func clientDecode(t *testing.T, in []byte, wrap func(net.Conn) net.Conn) amqp.Table {
	t.Helper()
	ds, err := amqptest.DecodeTables([][]byte{in}, "dlq-x-q-0", wrap)
	if err != nil {
		t.Fatalf("amqp091-go does not decode a table tableDecodable accepts: %v", err)
	}
	return ds[0].Headers
}

// TestRawHeadersOnlyForTheirConsumers: deliveries to other consumers, and
// tables without the secret, are read the ordinary way.
func TestRawHeadersOnlyForTheirConsumers(t *testing.T) {
	in := amqptest.Concat(amqptest.Entry("a", amqptest.Long(1)), amqptest.Entry(headerRaw, []byte{'x', 0, 0, 0, 1, 0}))
	cfg := newRawConfig()
	c := &Conn{raw: cfg}
	c.DeliverRawHeaders("other-")
	wrap := func(nc net.Conn) net.Conn { return newFrameFilter(nc, newUndecodableTables(), cfg.forDial(0)) }
	got := clientDecode(t, in, wrap)
	require.Equal(t, amqp.Table{"a": int64(1), headerRaw: []byte{0}}, got, "not a raw consumer: decoded as it is")
	_, body, ok := c.RawHeaders(got, []byte("body"))
	require.False(t, ok, "a publisher's own entry of that name is not taken for the filter's")
	require.Equal(t, []byte("body"), body)

	c.DeliverRawHeaders("dlq-x-")
	ds, err := amqptest.DecodeMessages([][]byte{in}, [][]byte{[]byte("body")}, "dlq-x-q-0", wrap)
	require.NoError(t, err)
	table, body, ok := c.RawHeaders(ds[0].Headers, ds[0].Body)
	require.True(t, ok)
	require.Equal(t, in, table, "the publisher's entry stays inside the bytes")
	require.Equal(t, []byte("body"), body)

	forged := amqp.Table{headerRaw: append(append([]byte(nil), cfg.secret[:]...), 0, 0, 0, 9)}
	_, body, ok = c.RawHeaders(forged, []byte("body"))
	require.False(t, ok, "a length past the body is no marker of the filter's")
	require.Equal(t, []byte("body"), body)
}

// methodFrame builds a method frame on channel 1.
func methodFrame(class, id uint16, args []byte) []byte {
	p := binary.BigEndian.AppendUint16(nil, class)
	p = binary.BigEndian.AppendUint16(p, id)
	p = append(p, args...)
	f := binary.BigEndian.AppendUint32([]byte{frameTypeMethod, 0, 1}, uint32(len(p)))
	return append(append(f, p...), frameEndByte)
}

// TestRawDeliveriesWhichHeaders: only the content header right after a
// basic.deliver to a wanted tag is taken as bytes (not after basic.get-ok
// or basic.return, nor the next one), and only when the new frame fits
// the negotiated frame_max.
func TestRawDeliveriesWhichHeaders(t *testing.T) {
	cfg := newRawConfig()
	(&Conn{raw: cfg}).DeliverRawHeaders("dlq-a-")
	r := cfg.forDial(0)
	deliver := func(tag string) []byte {
		args := append(shortstrEnc(tag), make([]byte, 9)...)
		return methodFrame(classBasic, methodDeliver, append(append(args, shortstrEnc("ex")...), shortstrEnc("rk")...))
	}
	hf := headerFrame(tableEnc(entry("k", fieldLong(1)), entry("x-delivery-count", fieldLong(2))))

	r.method(deliver("dlq-a-q-0"))
	require.True(t, r.header(hf))
	require.False(t, r.header(hf), "only the header right after the deliver")
	r.method(deliver("dlq-b-q-0"))
	require.False(t, r.header(hf), "another consumer's")
	r.method(deliver("dlq-a-q-0"))
	r.method(methodFrame(classBasic, 71, nil)) // basic.get-ok
	require.False(t, r.header(hf))
	r.method(methodFrame(classBasic, 50, nil)) // basic.return
	require.False(t, r.header(hf))

	out, ok := r.rewrite(hf, nil)
	require.True(t, ok)
	hlen := 7 + int(binary.BigEndian.Uint32(out[3:7])) + 1
	header, bodyFrame := out[:hlen], out[hlen:]
	off, n, ok := headerTable(header)
	require.True(t, ok)
	got := header[off : off+n]
	require.True(t, bytes.HasPrefix(got, shortstrEnc(headerRaw)))
	require.True(t, bytes.HasSuffix(got, entry("x-delivery-count", fieldLong(2))), "the return count stays readable")
	require.True(t, bytes.HasSuffix(header, append(shortstrEnc("msg-1"), frameEndByte)), "the properties after the headers are kept")
	kept := entry("k", fieldLong(1))
	require.Equal(t, uint64(42+len(kept)), binary.BigEndian.Uint64(header[11:19]), "the body size counts the table in front")
	wantBody := binary.BigEndian.AppendUint32([]byte{frameTypeBody, 0, 1}, uint32(len(kept)))
	require.Equal(t, append(append(wantBody, kept...), frameEndByte), bodyFrame, "the table, without the return count, in a body frame on the same channel")
	_, ok = r.rewrite(headerFrame(tableEnc(entry("x-delivery-count", fieldLong(2)))), nil)
	require.False(t, ok, "nothing but return counts: left as it is")

	// connection.tune: frame_max as amqp091-go negotiates it.
	tune := binary.BigEndian.AppendUint16(nil, 0)
	tune = binary.BigEndian.AppendUint32(tune, uint32(len(hf)+5))
	tune = binary.BigEndian.AppendUint16(tune, 0)
	f := methodFrame(classConnection, methodTune, tune)
	f[1], f[2] = 0, 0
	r.method(f)
	require.Equal(t, max(len(hf)+5, 4096), r.frameMax)
	big := headerFrame(tableEnc(entry("k", append(binary.BigEndian.AppendUint32([]byte{'S'}, 5000), make([]byte, 5000)...))))
	bigTable := 1 + 1 + 5 + 5000
	r.frameMax = 8 + bigTable - 1
	_, ok = r.rewrite(big, nil)
	require.False(t, ok, "a table whose body frame would not fit frame_max is left to amqp091-go")
	r.frameMax = 8 + bigTable
	_, ok = r.rewrite(big, nil)
	require.True(t, ok, "one that fits")
	// A small table: the marker makes the content header longer.
	r.frameMax = len(header) - 1
	_, ok = r.rewrite(hf, nil)
	require.False(t, ok, "a content header that would no longer fit frame_max is left to amqp091-go")
	r.frameMax = len(header)
	_, ok = r.rewrite(hf, nil)
	require.True(t, ok)
	r.frameMax = 0
	_, ok = r.rewrite(big, nil)
	require.True(t, ok, "no frame_max")
}
