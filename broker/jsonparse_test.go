package broker

import (
	"reflect"
	"testing"
)

var jsonParseSeeds = []string{
	`{"x-app":"bench","x-attempt":{"type":"int32","value":3},"x-tenant":"acme"}`,
	`{"a":[1,2.5,-3e10,0,-0.0,1E+2],"b":{"c":null,"d":true,"e":false},"f":"\u00e9\n\t\"\\\/x","g":[]," h ":{}}`,
	` { "k" : "v" } `,
	`{"x-death":[{"count":{"type":"int64","value":1},"reason":"rejected","queue":"orders","time":{"type":"timestamp","value":"2026-05-01T10:00:00Z"},"routing-keys":["orders"]}]}`,
	`{"dup":1,"dup":2}`,
	`{"s":"\ud83d\ude00"}`,
	`{"s":"\ud800"}`,
	"{\"s\":\"\xff\"}",
	"{\"s\":\"日本\"}",
	`{"a":01}`, `{"a":1.}`, `{"a":-}`, `{"a":.5}`, `{"a":1e}`, `[1,]`, `{"a":1,}`, `{"a" 1}`, `{} {}`, `{}x`, ``, ` `,
	`nul`, `"\u12"`, `"\x"`, "\"a\x01\"", `[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
	`123`, `"str"`, `null`, `true`, `{"a":"\u0000"}`, `{"a":"\u2028<>&"}`,
}

func checkParseJSONFast(t *testing.T, in []byte) {
	fast, ok := parseJSONFast(in)
	want, err := parseJSONStd(in)
	if !ok {
		return // the caller falls back to encoding/json
	}
	if err != nil {
		t.Fatalf("parseJSONFast accepted %q, encoding/json refuses it: %v", in, err)
	}
	if !reflect.DeepEqual(fast, want) {
		t.Fatalf("parseJSONFast(%q) = %#v, encoding/json gives %#v", in, fast, want)
	}
}

func TestParseJSONFastMatchesEncodingJSON(t *testing.T) {
	for _, s := range jsonParseSeeds {
		checkParseJSONFast(t, []byte(s))
	}
	// The common shapes must take the fast path.
	for _, s := range jsonParseSeeds[:5] {
		if _, ok := parseJSONFast([]byte(s)); !ok {
			t.Errorf("parseJSONFast(%q) fell back", s)
		}
	}
}

func FuzzParseJSONFast(f *testing.F) {
	for _, s := range jsonParseSeeds {
		f.Add([]byte(s))
	}
	f.Fuzz(checkParseJSONFast)
}
