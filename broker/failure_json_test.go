package broker

import (
	"bytes"
	"encoding/json"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// checkFailureJSON: f.AppendJSON writes what encoding/json.Marshal writes,
// or, for a time encoding/json refuses, what it writes without that time.
func checkFailureJSON(t *testing.T, f Failure) {
	t.Helper()
	got := f.AppendJSON(nil)
	want, err := json.Marshal(f)
	if err != nil {
		f.At = nil
		if want, err = json.Marshal(f); err != nil {
			t.Fatalf("encoding/json refuses %+v without its time: %v", f, err)
		}
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("AppendJSON of %+v:\n%s\nencoding/json:\n%s", f, got, want)
	}
	if !json.Valid(got) {
		t.Fatalf("AppendJSON of %+v is not JSON: %s", f, got)
	}
}

func TestFailureAppendJSONMatchesEncodingJSON(t *testing.T) {
	at := time.Date(2024, 3, 5, 14, 7, 9, 123456700, time.UTC)
	whole := time.Date(2024, 3, 5, 14, 7, 9, 0, time.UTC)
	far := time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, f := range []Failure{
		{},
		{Message: "x"},
		{Type: "System.InvalidOperationException", Message: `Order <42> & "co"`, Stack: "at A()\n\tat B()\r\n",
			Origin: "nservicebus", Extra: map[string]string{"failed_queue": "orders", "host": "web-1", "a\u2028b": "\x01\x1f"}, At: &at},
		{Origin: "masstransit", At: &whole},
		{Message: "bad \xff bytes and \x00 NUL", Extra: map[string]string{"\xfe": "\u2029"}},
		{Message: "too far", At: &far},
	} {
		checkFailureJSON(t, f)
	}
	// What ingest writes for a real convention's headers.
	f := ExtractFailure(amqp.Table{
		"NServiceBus.ExceptionInfo.ExceptionType": "System.TimeoutException",
		"NServiceBus.ExceptionInfo.Message":       "The operation timed out <after 30 s>",
		"NServiceBus.ExceptionInfo.StackTrace":    "at Orders.Handle()",
		"NServiceBus.FailedQ":                     "orders@host",
		"NServiceBus.TimeOfFailure":               "2024-03-05 14:07:09:123456 Z",
	}, Properties{})
	if f.Origin == "" || f.At == nil {
		t.Fatalf("the convention's headers gave %+v", f)
	}
	checkFailureJSON(t, f)
}

func FuzzFailureAppendJSON(f *testing.F) {
	f.Add("System.Exception", "boom <&>", "at A()\n", "generic", "failed_queue", "orders", "host", "web-1", int64(1709647629123456700), true)
	f.Add("", "\xff\x00\u2028", "", "", "\xfe", "\x1f", "", "", int64(0), false)
	f.Add("t", "", "", "", "", "", "", "", int64(-62135596800000000000/1000), true)
	f.Fuzz(func(t *testing.T, typ, msg, stack, origin, k1, v1, k2, v2 string, unixNano int64, hasAt bool) {
		fl := Failure{Type: typ, Message: msg, Stack: stack, Origin: origin}
		if k1 != "" || k2 != "" {
			fl.Extra = map[string]string{k1: v1, k2: v2}
		}
		if hasAt {
			at := time.Unix(0, unixNano).UTC()
			fl.At = &at
		}
		checkFailureJSON(t, fl)
	})
}
