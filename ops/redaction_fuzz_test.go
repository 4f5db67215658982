package ops

import (
	"bytes"
	"encoding/json"
	"testing"
)

// FuzzMaskBody: any body, JSON or not, is masked or hidden, never a
// panic; a valid JSON body stays valid JSON, and masking again changes
// nothing more.
func FuzzMaskBody(f *testing.F) {
	r, err := newRedactor(Redaction{BodyPaths: []string{"card.number", "items[*].secret", "a[1]"}})
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{`{"card":{"number":"4111"}}`, `[{"items":[{"secret":1}]}]`, `{"a":[0,1,2]}`, `{"x":"\u0041"}`, `{`, `[1,2`, `"s"`, `nul`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		got := r.body(body, "application/json")
		if json.Valid(body) && !json.Valid(got) {
			t.Fatalf("masking %q made invalid JSON %q", body, got)
		}
		if !bytes.Equal(r.body(got, "application/json"), got) && json.Valid(body) {
			t.Fatalf("masking is not stable: %q -> %q", body, got)
		}
		_, _ = parseBodyPath(string(body))
		if json.Valid(body) {
			if _, err := findPaths(body, r.paths); err != nil {
				t.Fatalf("valid JSON %q refused: %v", body, err)
			}
		} else if _, err := findPaths(body, r.paths); err == nil && len(bytes.TrimSpace(body)) > 0 {
			t.Fatalf("invalid JSON %q accepted", body)
		}
	})
}
