package broker

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"math"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// FuzzDecodeHeadersJSON feeds arbitrary text to the decoder. It must never
// panic, and whatever it accepts must re-encode to valid, jsonb-safe JSON
// that decodes to the same table and encodes to the same bytes again.
func FuzzDecodeHeadersJSON(f *testing.F) {
	realistic, err := AppendHeadersJSON(nil, realisticHeaders())
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(realistic),
		`{}`, `null`, `[]`, `{"a":1}`,
		`{"s":{"type":"string","encoding":"base64","value":"AP8="}}`,
		`{"type":"table","encoding":"base64","value":{"AA==":{"type":"table","value":{"type":"x"}}}}`,
		`{"f":{"type":"float32","value":"NaN"},"g":{"type":"float64","value":-0},"h":{"type":"float64","value":"-Inf"}}`,
		`{"d":{"type":"decimal","value":{"scale":255,"value":-2147483648}}}`,
		`{"t":{"type":"timestamp","value":"9999-12-31T23:59:59Z"},"u":{"type":"timestamp","value":-9223372036854775808}}`,
		`{"n":{"type":"int64","value":-9223372036854775808},"u":{"type":"uint32","value":4294967295}}`,
		`{"a":[[[{"b":[null,true,"\u0000\ud800"]}]]]}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		t1, err := DecodeHeadersJSON(in)
		if err != nil {
			return
		}
		e1, err := AppendHeadersJSON(nil, t1)
		if err != nil {
			t.Fatalf("decoded table does not encode: %v", err)
		}
		if !json.Valid(e1) {
			t.Fatalf("invalid JSON: %s", e1)
		}
		if bytes.Contains(e1, []byte(`\u0000`)) {
			t.Fatalf("jsonb-unsafe \\u0000 in %s", e1)
		}
		t2, err := DecodeHeadersJSON(e1)
		if err != nil {
			t.Fatalf("own encoding does not decode: %v\n%s", err, e1)
		}
		if t1 == nil {
			t1 = amqp.Table{} // null decodes to nil, which encodes as {}
		}
		if !sameValue(t1, t2) {
			t.Fatalf("unstable round trip:\n%#v\n%#v", t1, t2)
		}
		e2, err := AppendHeadersJSON(nil, t2)
		if err != nil || !bytes.Equal(e1, e2) {
			t.Fatalf("encoding not stable (err %v):\n%s\n%s", err, e1, e2)
		}
	})
}

// FuzzHeadersRoundTrip builds a table of every AMQP type from the fuzz
// input (arbitrary bytes in strings and keys, NaN payloads, any timestamp)
// and requires encode→decode to give it back. The death and failure
// extractors run on it too: they must not panic on anything.
func FuzzHeadersRoundTrip(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte("\x0e\x03\x05x-death\x0d\x02\x0e\x02\x05queue\x09\x01q\x05count\x04\x00\x00\x00\x00\x00\x00\x00\x03"))
	f.Add([]byte("\x0e\x02\x04type\x09\x05int8\x05value\x03\x01"))
	f.Add([]byte("\x0e\x01\x02\xff\x00\x09\x03a\x00\xff"))
	f.Add(bytes.Repeat([]byte{0x0d, 0x01}, 40))
	f.Fuzz(func(t *testing.T, in []byte) {
		g := &tableGen{in: in}
		tab := g.table(0)
		enc, err := AppendHeadersJSON(nil, tab)
		if err != nil {
			t.Fatalf("encode: %v", err)
		}
		if !json.Valid(enc) || bytes.Contains(enc, []byte(`\u0000`)) {
			t.Fatalf("bad JSON: %s", enc)
		}
		dec, err := DecodeHeadersJSON(enc)
		if err != nil {
			t.Fatalf("decode: %v\n%s", err, enc)
		}
		if !sameValue(tab, dec) {
			t.Fatalf("round trip:\n%#v\n%#v\n%s", tab, dec, enc)
		}

		info := ExtractDeath(tab)
		if _, err := json.Marshal(info.Deaths); err != nil {
			t.Fatalf("deaths do not marshal: %v", err)
		}
		fail := ExtractFailure(tab, Properties{})
		if _, err := json.Marshal(fail); err != nil {
			t.Fatalf("failure does not marshal: %v", err)
		}
	})
}

// tableGen turns fuzz bytes into AMQP values of the types the amqp091-go
// reader produces. Running out of input yields zero values.
type tableGen struct {
	in []byte
}

func (g *tableGen) byte() byte {
	if len(g.in) == 0 {
		return 0
	}
	b := g.in[0]
	g.in = g.in[1:]
	return b
}

func (g *tableGen) bytes(n int) []byte {
	n = min(n, len(g.in))
	b := append([]byte{}, g.in[:n]...)
	g.in = g.in[n:]
	return b
}

func (g *tableGen) uint64() uint64 {
	var b [8]byte
	copy(b[:], g.bytes(8))
	return binary.BigEndian.Uint64(b[:])
}

// key favours the names that have special meaning to the encoding.
func (g *tableGen) key() string {
	special := []string{"type", "value", "encoding", "x-death", "queue", "reason", "count", "time", "routing-keys"}
	if c := g.byte(); int(c) < len(special) {
		return special[c]
	}
	return string(g.bytes(int(g.byte() % 12)))
}

func (g *tableGen) table(depth int) amqp.Table {
	n := int(g.byte() % 8)
	t := make(amqp.Table, n)
	for range n {
		t[g.key()] = g.value(depth + 1)
	}
	return t
}

func (g *tableGen) value(depth int) any {
	kind := g.byte() % 17
	if depth > 6 && kind >= 13 {
		kind = 0 // keep nesting bounded
	}
	switch kind {
	case 0:
		return nil
	case 1:
		return g.byte()&1 == 1
	case 2:
		return int8(g.byte())
	case 3:
		return int16(g.uint64())
	case 4:
		return int64(g.uint64())
	case 5:
		return int32(g.uint64())
	case 6:
		return uint8(g.byte())
	case 7:
		return uint16(g.uint64())
	case 8:
		return uint32(g.uint64())
	case 9:
		return string(g.bytes(int(g.byte() % 32))) // any bytes, valid UTF-8 or not
	case 10:
		if g.byte()&1 == 1 {
			return math.Float32frombits(uint32(g.uint64()))
		}
		return math.Float64frombits(g.uint64())
	case 11:
		return amqp.Decimal{Scale: g.byte(), Value: int32(g.uint64())}
	case 12:
		return time.Unix(int64(g.uint64()), 0)
	case 13:
		n := int(g.byte() % 5)
		a := make([]any, n)
		for i := range a {
			a[i] = g.value(depth + 1)
		}
		return a
	case 14:
		return g.table(depth)
	case 15:
		return g.bytes(int(g.byte()))
	}
	return "plain text"
}
