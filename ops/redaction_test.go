package ops

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

func mustRedactor(t *testing.T, r Redaction) *redactor {
	t.Helper()
	red, err := newRedactor(r)
	require.NoError(t, err)
	return red
}

func TestParseBodyPath(t *testing.T) {
	t.Parallel()
	for in, want := range map[string]string{
		"card.number":           "$.card.number",
		"$.user.email":          "$.user.email",
		"$user":                 "$.user",
		"items[*].card":         "$.items[*].card",
		"items[].card":          "$.items[*].card",
		"items[2].sku":          "$.items[2].sku",
		"matrix[*][1]":          "$.matrix[*][1]",
		" $.a.b_c-d ":           "$.a.b_c-d",
		"$.payments[*].card[0]": "$.payments[*].card[0]",
	} {
		p, err := parseBodyPath(in)
		require.NoError(t, err, in)
		require.Equal(t, want, p.String(), in)
	}
	for _, bad := range []string{"", "$", "$.", "a..b", "a[x]", "a[-1]", "a[1", "a[1]b", "a.*"} {
		_, err := parseBodyPath(bad)
		require.Error(t, err, bad)
	}
}

func TestMaskBody(t *testing.T) {
	t.Parallel()
	r := mustRedactor(t, Redaction{BodyPaths: []string{"card.number", "$.user.email", "items[*].secret", "lines.card", "pins[1]"}})
	for _, c := range []struct{ in, want string }{
		// Nested objects, formatting kept byte for byte around the masks.
		{`{"card": {"number": "4111111111111111", "exp": "12/29"}, "id": 7}`,
			`{"card": {"number": "[redacted]", "exp": "12/29"}, "id": 7}`},
		{`{"user":{"email":"a@b.c","name":"Ann"}}`, `{"user":{"email":"[redacted]","name":"Ann"}}`},
		// A whole object or array at the path is masked whole.
		{`{"card":{"number":{"pan":"4111","last4":"1111"}}}`, `{"card":{"number":"[redacted]"}}`},
		{`{"user":{"email":["a@b.c","d@e.f"]}}`, `{"user":{"email":"[redacted]"}}`},
		// Arrays: [*] explicit, and a key reached on an array applies to
		// every element, at any depth.
		{`{"items":[{"secret":1},{"secret":"x","ok":true},{"other":2}]}`, `{"items":[{"secret":"[redacted]"},{"secret":"[redacted]","ok":true},{"other":2}]}`},
		{`{"lines":[[{"card":"4111"}],{"card":null}]}`, `{"lines":[[{"card":"[redacted]"}],{"card":"[redacted]"}]}`},
		{`{"pins":[1,2,3]}`, `{"pins":[1,"[redacted]",3]}`},
		// A top-level array of messages.
		{`[{"card":{"number":1}},{"card":{"number":2}}]`, `[{"card":{"number":"[redacted]"}},{"card":{"number":"[redacted]"}}]`},
		// Escaped member names are matched by their value.
		{`{"us\u0065r":{"email":"x"}}`, `{"us\u0065r":{"email":"[redacted]"}}`},
		// Nothing configured is there: unchanged.
		{`{"card":"4111"}`, `{"card":"4111"}`},
		{` {"a": [1, 2.5e3, -0, true, false, null, "s\"}"]} `, ` {"a": [1, 2.5e3, -0, true, false, null, "s\"}"]} `},
	} {
		got := string(r.body([]byte(c.in), "application/json"))
		require.Equal(t, c.want, got, c.in)
		require.True(t, json.Valid([]byte(got)), got)
	}
	// Not JSON though it says so: hidden, since the fields cannot be found.
	require.Equal(t, notJSONBody, string(r.body([]byte(`{"card": {"number": 4111`), "application/json")))
	require.Equal(t, notJSONBody, string(r.body([]byte(`{"card": 1} trailing`), "")))
	// Another content type: not a JSON body, shown as it is.
	require.Equal(t, "card.number=4111", string(r.body([]byte("card.number=4111"), "application/x-www-form-urlencoded")))
	require.Equal(t, `{"card":{"number":1}}`, string(r.body([]byte(`{"card":{"number":1}}`), "text/plain")))
	// No content type: JSON by its first byte.
	require.Equal(t, `{"card":{"number":"[redacted]"}}`, string(r.body([]byte(`{"card":{"number":1}}`), "")))
	require.Equal(t, "plain text", string(r.body([]byte("plain text"), "")))
	// Deeper than the scanner goes: hidden, never a stack overflow.
	deep := strings.Repeat("[", 100000) + strings.Repeat("]", 100000)
	require.Equal(t, notJSONBody, string(r.body([]byte(deep), "application/json")))
}

func TestMaskHeaders(t *testing.T) {
	t.Parallel()
	r := mustRedactor(t, Redaction{Headers: []string{"Authorization", "x-card"}})
	got := r.headersJSON(json.RawMessage(`{"authorization":"Bearer abc","x-card":{"type":"int64","value":4111},"x-tenant":"acme"}`))
	require.JSONEq(t, `{"authorization":"[redacted]","x-card":"[redacted]","x-tenant":"acme"}`, string(got))
	same := json.RawMessage(`{"x-tenant":"acme"}`)
	require.Equal(t, same, r.headersJSON(same))
	// A table the codec wrapped (a key that is not UTF-8): masked whole.
	wrapped := json.RawMessage(`{"type":"table","encoding":"base64","value":{"YXV0aG9yaXphdGlvbg==":"x","/w==":"y"}}`)
	require.Equal(t, `{"[redacted]":"[redacted]"}`, string(r.headersJSON(wrapped)))
	var nilRed *redactor
	require.Equal(t, same, nilRed.headersJSON(same))
}

func TestRedactionByRole(t *testing.T) {
	t.Parallel()
	everyone := mustRedactor(t, Redaction{Headers: []string{"authorization"}})
	belowAdmin := mustRedactor(t, Redaction{Headers: []string{"authorization"}, RevealRole: auth.RoleAdmin})
	viewer, operator, admin := auth.Principal{Role: auth.RoleViewer}, auth.Principal{Role: auth.RoleOperator}, auth.Principal{Role: auth.RoleAdmin}
	for _, p := range []auth.Principal{viewer, operator, admin} {
		require.True(t, everyone.masks(p), p.Role)
	}
	require.True(t, belowAdmin.masks(viewer))
	require.True(t, belowAdmin.masks(operator))
	require.False(t, belowAdmin.masks(admin))
	var none *redactor
	require.False(t, none.masks(viewer))
	r, err := newRedactor(Redaction{})
	require.NoError(t, err)
	require.Nil(t, r, "nothing configured: nothing masked")
	_, err = newRedactor(Redaction{Headers: []string{"a"}, RevealRole: "root"})
	require.ErrorContains(t, err, "reveal role")
	_, err = newRedactor(Redaction{BodyPaths: []string{"a[x]"}})
	require.ErrorContains(t, err, "a[x]")
}

func TestMaskMessage(t *testing.T) {
	t.Parallel()
	r := mustRedactor(t, Redaction{Headers: []string{"authorization"}, BodyPaths: []string{"card.number"}})
	body := []byte(`{"card":{"number":"4111111111111111"}}`)
	m := store.Message{Properties: json.RawMessage(`{"content_type":"application/json"}`),
		Headers: json.RawMessage(`{"authorization":"Bearer abc"}`), Body: &body}
	r.message(&m)
	require.Equal(t, `{"authorization":"[redacted]"}`, string(m.Headers))
	require.Equal(t, `{"card":{"number":"[redacted]"}}`, string(*m.Body))
	require.Equal(t, `{"card":{"number":"4111111111111111"}}`, string(body), "the stored body is not changed in place")
}

func TestRestoreBody(t *testing.T) {
	t.Parallel()
	r := mustRedactor(t, Redaction{BodyPaths: []string{"card.number", "items[*].secret"}})
	orig := []byte(`{"card":{"number":"4111111111111111","exp":"12/29"},"items":[{"secret":"s0"},{"secret":{"k":1}}],"total":5}`)
	// The operator fixed total in the masked view and sent it back: the
	// placeholders get the real values, whatever their type.
	edited := []byte(`{"card":{"number":"[redacted]","exp":"12/29"},"items":[{"secret":"[redacted]"},{"secret":"[redacted]"}],"total":6}`)
	got, err := r.restoreBody(edited, orig, "application/json")
	require.NoError(t, err)
	require.Equal(t, `{"card":{"number":"4111111111111111","exp":"12/29"},"items":[{"secret":"s0"},{"secret":{"k":1}}],"total":6}`, string(got))

	// A real new value is sent as given.
	edited = []byte(`{"card":{"number":"5500000000000004"}}`)
	got, err = r.restoreBody(edited, orig, "application/json")
	require.NoError(t, err)
	require.Equal(t, string(edited), string(got))

	// A placeholder where the message has no value: refused, never sent.
	_, err = r.restoreBody([]byte(`{"items":[{"secret":"s0"},{"secret":"x"},{"secret":"[redacted]"}]}`), orig, "application/json")
	require.ErrorIs(t, err, ErrInvalid)
	require.ErrorContains(t, err, "$.items[2].secret")

	// The placeholder outside a masked path is just text.
	got, err = r.restoreBody([]byte(`{"note":"[redacted]"}`), orig, "application/json")
	require.NoError(t, err)
	require.Equal(t, `{"note":"[redacted]"}`, string(got))
}

// failureOf is the failure ingest stores for headers h.
func failureOf(t *testing.T, h amqp.Table) (json.RawMessage, json.RawMessage) {
	t.Helper()
	hj, err := broker.AppendHeadersJSON(nil, h)
	require.NoError(t, err)
	fj, err := json.Marshal(broker.ExtractFailure(h, broker.Properties{}))
	require.NoError(t, err)
	return fj, hj
}

// The parts of a failure that masked headers gave it are masked, in every
// convention, and only those: a type read from a masked stack, a detail
// of extra read from a masked header; the others stay. Headers that
// cannot be read mask every part.
func TestMaskFailure(t *testing.T) {
	t.Parallel()
	at := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	for _, c := range []struct {
		name   string
		masked []string
		h      amqp.Table
		want   string
	}{
		{"generic message", []string{"x-error-message"},
			amqp.Table{"x-error-message": "card 4111 declined", "x-exception-type": "CardError"},
			`{"message":"[redacted]","origin":"generic","type":"CardError"}`},
		{"spring stack gives the type", []string{"x-exception-stacktrace"},
			amqp.Table{"x-exception-message": "boom", "x-exception-stacktrace": "com.acme.CardException: 4111\n\tat x"},
			`{"message":"boom","origin":"spring","stack":"[redacted]","type":"[redacted]"}`},
		{"celery detail", []string{"argsrepr"},
			amqp.Table{"task": "charge", "id": "c-1", "argsrepr": "('4111',)"},
			`{"extra":{"argsrepr":"[redacted]","id":"c-1","task":"charge"},"origin":"celery"}`},
		{"time of failure", []string{"nservicebus.timeoffailure"},
			amqp.Table{"NServiceBus.ExceptionInfo.Message": "m", "NServiceBus.TimeOfFailure": at},
			`{"message":"m","origin":"nservicebus"}`},
		{"a masked header failures do not read", []string{"authorization"},
			amqp.Table{"x-error-message": "card 4111 declined", "authorization": "Bearer x"},
			`{"message":"card 4111 declined","origin":"generic"}`},
	} {
		r := mustRedactor(t, Redaction{Headers: c.masked})
		fj, hj := failureOf(t, c.h)
		m := store.Message{Failure: fj, Headers: hj}
		r.message(&m)
		require.JSONEq(t, c.want, string(m.Failure), c.name)
	}
	// Headers that cannot be read: every part.
	r := mustRedactor(t, Redaction{Headers: []string{"x-error-message"}})
	m := store.Message{Failure: json.RawMessage(`{"type":"T","message":"4111","origin":"generic"}`), Headers: json.RawMessage(`{"x-error-message":7}`)}
	r.message(&m)
	require.JSONEq(t, `{"type":"[redacted]","message":"[redacted]","origin":"[redacted]"}`, string(m.Failure))
}

// With a header that gives failures their message masked, failure groups
// and earlier deaths, which keep no headers, have their failure text
// masked whole; their type only when a masked header gives types.
func TestMaskFailureGroupsAndDeaths(t *testing.T) {
	t.Parallel()
	g := store.Group{FailureType: "CardError", Pattern: "card <n> declined", SampleMessage: "card 4111 declined"}
	msgOnly := mustRedactor(t, Redaction{Headers: []string{"X-Error-Message"}})
	require.True(t, msgOnly.failMessage)
	require.False(t, msgOnly.failType)
	mg := g
	msgOnly.group(&mg)
	require.Equal(t, store.Group{FailureType: "CardError", Pattern: RedactedValue, SampleMessage: RedactedValue}, mg)
	typ := mustRedactor(t, Redaction{Headers: []string{"x-exception-fqcn"}})
	tg := g
	typ.group(&tg)
	require.Equal(t, store.Group{FailureType: RedactedValue, Pattern: g.Pattern, SampleMessage: g.SampleMessage}, tg)
	other := mustRedactor(t, Redaction{Headers: []string{"authorization", "x-error-origin"}})
	og := g
	other.group(&og)
	require.Equal(t, g, og)

	m := store.Message{Headers: json.RawMessage(`{}`), DeathHistory: json.RawMessage(
		`[{"failure_type":"CardError","failure_message":"card 4111 declined","reason":"rejected"},{"failure_type":null,"failure_message":""}]`)}
	msgOnly.message(&m)
	require.JSONEq(t, `[{"failure_type":"CardError","failure_message":"[redacted]","reason":"rejected"},{"failure_type":null,"failure_message":""}]`,
		string(m.DeathHistory))
	none := store.Message{Headers: json.RawMessage(`{}`), DeathHistory: json.RawMessage(`[]`)}
	msgOnly.message(&none)
	require.Equal(t, `[]`, string(none.DeathHistory))
}
