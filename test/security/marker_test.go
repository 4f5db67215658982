package security

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"os/exec"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
)

// newMarker is a string that cannot occur by chance.
func newMarker() string { return "MRK" + strings.ToUpper(rand.Text()[:13]) }

// forms are the ways a value can appear in a table or a dump: as it is,
// in any case; in hex (bytea's text form); in base64 (JSON holds bytes so)
// at each of the three alignments.
func forms(v string) []string {
	out := []string{strings.ToLower(v), strings.ToLower(hex.EncodeToString([]byte(v)))}
	for pad := 0; pad < 3; pad++ {
		enc := base64.StdEncoding.EncodeToString(append(make([]byte, pad), v...))
		// The characters that depend on the value alone.
		from := (pad*4 + 2) / 3
		out = append(out, strings.ToLower(enc[from+1:len(enc)-4]))
	}
	return out
}

// requireAbsent fails when text holds v in any of its forms.
func requireAbsent(t *testing.T, what, text, v string) {
	t.Helper()
	low := strings.ToLower(text)
	for _, f := range forms(v) {
		if i := strings.Index(low, f); i >= 0 {
			t.Fatalf("%s holds %q as %q: ...%s...", what, v, f, text[max(0, i-120):min(len(text), i+len(f)+120)])
		}
	}
}

// TestMarkerNeverStoredInPlainText: with encryption on, a marker in a
// message's body, in a chosen header, in its message id, correlation id
// and failure message, in an edit (through the API and the control
// queue) never appears in any column of any table, as text, hex or
// base64: the raw tables are scanned with SQL, and a pg_dump of the
// schema is searched too. Identifying values are still found (keyed
// hashes); a search over text is refused, saying why.
func TestMarkerNeverStoredInPlainText(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	marker := newMarker()
	d.env["DLQ_ENCRYPTION_KEYS"] = newKey(t, "k1")
	d.env["DLQ_ENCRYPTION_HEADERS"] = "x-secret"
	d.serve(nil)

	for i := range 4 {
		d.deadLetter(amqp.Publishing{
			ContentType: "application/json", MessageId: fmt.Sprintf("mid-%s-%d", marker, i), CorrelationId: "cid-" + marker,
			Headers: amqp.Table{"x-secret": "s-" + marker, "x-tenant": "acme", "x-exception-message": "card " + marker + " declined"},
			Body:    []byte(fmt.Sprintf(`{"card":{"number":"%s"},"n":%d}`, marker, i)),
		})
	}
	ms := d.waitMessages(4)
	for _, m := range ms {
		require.Contains(t, string(m.Body), marker, "an admin reads the real body")
		require.Equal(t, "s-"+marker, m.Headers["x-secret"])
		require.Equal(t, "acme", m.Headers["x-tenant"])
		require.Contains(t, fmt.Sprint(m.Failure["message"]), marker)
		require.NotNil(t, m.Encryption)
	}

	// Identifying values are found whole through their keyed hashes.
	require.Len(t, d.messages(tokViewer, "&q="+url.QueryEscape("mid-"+marker+"-2")), 1)
	require.Len(t, d.messages(tokViewer, "&q="+url.QueryEscape("CID-"+marker)), 4)
	require.Len(t, d.messages(tokViewer, "&q=acme"), 4, "a plain header's value")
	// Text is sealed: a search over it is refused, saying why.
	code, b := d.get(tokViewer, "/api/v1/messages?q="+url.QueryEscape("card declined"))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, string(b), "encrypted at rest")
	// So is an export by it, not an empty export marked complete.
	code, b = d.get(tokAdmin, "/api/v1/messages/export?q="+url.QueryEscape("card declined"))
	require.Equal(t, http.StatusBadRequest, code, string(b))
	require.Contains(t, string(b), "encrypted at rest")

	// An edit through the API, one through the control queue, a replay
	// and an acknowledge: each leaves records behind.
	ids := []int64{ms[0].ID, ms[1].ID, ms[2].ID, ms[3].ID}
	body := base64.StdEncoding.EncodeToString([]byte(`{"card":{"number":"` + marker + `"},"edited":true}`))
	code, b = d.request(tokOperator, http.MethodPost, fmt.Sprintf("/api/v1/messages/%d/edit-replay", ids[0]), map[string]any{
		"body_base64": body, "set_headers": map[string]any{"x-secret": "edited-" + marker, "x-note": "plain-note"}})
	require.Equal(t, http.StatusAccepted, code, string(b))
	require.Contains(t, string(b), marker, "the caller is shown its copy")

	cc, err := control.Dial(context.Background(), dlqtest.AMQPURL(), d.control, tokOperator)
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := control.Command{Command: control.CmdEditReplay, CommandID: "edit-" + rand.Text(), ID: ids[1], BodyBase64: &body}
	answer, err := cc.Call(ctx, cmd)
	require.NoError(t, err)
	require.True(t, answer.OK, "%s", answer.Error)
	require.Contains(t, string(answer.Result), body, "the answer carries the copy")
	again, err := cc.Call(ctx, cmd)
	require.NoError(t, err)
	require.JSONEq(t, string(answer.Result), string(again.Result), "a repeated command_id answers the first answer, opened")

	task := d.replayTo(tokOperator, ids[2])
	_, mb := d.get(tokAdmin, fmt.Sprintf("/api/v1/messages/%d", ids[2]))
	require.EqualValues(t, 1, task["published"], "%v %s", task, mb)
	got := d.sinkMessages(1)[0]
	require.Contains(t, string(got.Body), marker)
	code, b = d.request(tokOperator, http.MethodPost, "/api/v1/messages/acknowledge", map[string]any{"ids": []int64{ids[3]}})
	require.Equal(t, http.StatusOK, code, string(b))
	// The two edited copies die again and come back as messages.
	d.waitMessages(6)

	// Every column of every table, as text.
	pool := basePool(t)
	rows, err := pool.Query(context.Background(), `SELECT table_name FROM information_schema.tables WHERE table_schema = $1 ORDER BY 1`, d.schema)
	require.NoError(t, err)
	var tables []string
	for rows.Next() {
		var n string
		require.NoError(t, rows.Scan(&n))
		tables = append(tables, n)
	}
	require.NoError(t, rows.Err())
	require.Contains(t, tables, "dead_messages")
	scanned := 0
	for _, table := range tables {
		var text *string
		q := fmt.Sprintf(`SELECT string_agg(t::text, E'\n') FROM %q.%q t`, d.schema, table)
		require.NoError(t, pool.QueryRow(context.Background(), q).Scan(&text))
		if text != nil {
			requireAbsent(t, "table "+table, *text, marker)
			scanned += len(*text)
		}
	}
	require.Greater(t, scanned, 10000, "the scan read the rows")

	// And a dump of the schema, as a backup would hold it.
	dump := exec.Command("pg_dump", "--data-only", "--schema="+d.schema, dlqtest.DatabaseURLBase())
	out, err := dump.Output()
	require.NoError(t, err, "pg_dump")
	require.Contains(t, string(out), "COPY "+d.schema+".dead_messages")
	requireAbsent(t, "pg_dump", string(out), marker)
	var raw []byte
	require.NoError(t, pool.QueryRow(context.Background(), fmt.Sprintf(`SELECT body FROM %q.dead_messages ORDER BY id LIMIT 1`, d.schema)).Scan(&raw))
	require.NotContains(t, string(raw), marker)

	// Nor in the logs.
	requireAbsent(t, "the log", d.logText(), marker)
}

func TestFormsFindEveryEncoding(t *testing.T) {
	t.Parallel()
	m := newMarker()
	for _, s := range []string{
		"x" + strings.ToLower(m) + "y",
		`\x00` + hex.EncodeToString([]byte("ab"+m+"cd")),
		base64.StdEncoding.EncodeToString([]byte("a" + m)),
		base64.StdEncoding.EncodeToString([]byte("ab" + m + "zz")),
		base64.StdEncoding.EncodeToString([]byte("abc" + m)),
		string(json.RawMessage(`"` + base64.StdEncoding.EncodeToString([]byte(m)) + `"`)),
	} {
		found := false
		for _, f := range forms(m) {
			found = found || strings.Contains(strings.ToLower(s), f)
		}
		require.True(t, found, "%q not found in %q", m, s)
	}
}
