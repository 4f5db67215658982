package security

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/dlqtest"
)

// TestRedactionOnEveryReadPath: configured headers and JSON body paths
// are masked for roles below the reveal role on every read path — the
// API's listing and single message, the CLI (table and JSON), the
// console's pages, the control queue's answers (and a repeated command's
// remembered one) — and in the logs; an admin reads the real values; a
// replay and an edit-then-replay send the real values, and a placeholder
// sent back in an edit never reaches the wire.
func TestRedactionOnEveryReadPath(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.env["DLQ_ENCRYPTION_KEYS"] = newKey(t, "k1")
	d.env["DLQ_REDACT_HEADERS"] = "Authorization"
	d.env["DLQ_REDACT_BODY_PATHS"] = "card.number,$.items[*].pan"
	d.env["DLQ_REDACT_REVEAL_ROLE"] = "admin"
	d.serve(nil)

	s := strings.ToUpper(rand.Text()[:10])
	auth, card, pan1, pan2 := "Bearer AUTH"+s, "CARD"+s, "PANA"+s, "PANB"+s
	secrets := []string{auth, card, pan1, pan2, "AUTH" + s}
	body := fmt.Sprintf(`{"card": {"number": "%s", "exp": "12/29"}, "items": [{"pan": "%s", "sku": 1}, {"pan": "%s"}], "total": 5}`, card, pan1, pan2)
	d.deadLetter(amqp.Publishing{ContentType: "application/json", MessageId: "m-" + s,
		Headers: amqp.Table{"authorization": auth, "x-tenant": "acme"}, Body: []byte(body)})
	id := d.waitMessages(1)[0].ID
	masked := `{"card": {"number": "[redacted]", "exp": "12/29"}, "items": [{"pan": "[redacted]", "sku": 1}, {"pan": "[redacted]"}], "total": 5}`

	requireMasked := func(what, text string) {
		t.Helper()
		for _, v := range secrets {
			require.NotContains(t, text, v, "%s shows a masked value", what)
		}
		require.Contains(t, text, "[redacted]", what)
	}

	// The API: listing and single message.
	for _, tok := range []string{tokViewer, tokOperator} {
		ms := d.messages(tok, "")
		require.Equal(t, masked, string(ms[0].Body))
		require.Equal(t, "[redacted]", ms[0].Headers["authorization"])
		require.Equal(t, "acme", ms[0].Headers["x-tenant"])
		code, b := d.get(tok, fmt.Sprintf("/api/v1/messages/%d", id))
		require.Equal(t, http.StatusOK, code)
		requireMasked("GET /api/v1/messages/{id}", string(b))
	}
	admin := d.messages(tokAdmin, "")[0]
	require.Equal(t, body, string(admin.Body), "the reveal role reads the real values")
	require.Equal(t, auth, admin.Headers["authorization"])

	// An export: each line opened and masked like the listing, the admin's
	// with the real values.
	exported := func(tok string) message {
		t.Helper()
		code, b := d.get(tok, "/api/v1/messages/export?status=all")
		require.Equal(t, http.StatusOK, code, string(b))
		lines := strings.Split(strings.TrimSpace(string(b)), "\n")
		require.Len(t, lines, 2, "one message line and the end line: %s", b)
		var m message
		require.NoError(t, json.Unmarshal([]byte(lines[0]), &m))
		require.Contains(t, lines[1], `"complete":true`)
		return m
	}
	ex := exported(tokViewer)
	require.Equal(t, masked, string(ex.Body), "the export holds what the listing shows")
	require.Equal(t, "[redacted]", ex.Headers["authorization"])
	ex = exported(tokAdmin)
	require.Equal(t, body, string(ex.Body), "an admin's export holds the real values, opened")
	require.Equal(t, auth, ex.Headers["authorization"])

	// The CLI, which prints what the API answers.
	for _, args := range [][]string{{"show", fmt.Sprint(id)}, {"show", "--json", fmt.Sprint(id)}, {"ls", "--json"}} {
		out, code := d.runCLI(tokViewer, args...)
		require.Equal(t, 0, code, out)
		if args[0] == "show" {
			require.Contains(t, out, "[redacted]", "dlq %v", args)
		}
		for _, v := range secrets {
			require.NotContains(t, out, v, "dlq %v", args)
		}
	}
	out, code := d.runCLI(tokAdmin, "show", fmt.Sprint(id))
	require.Equal(t, 0, code, out)
	require.Contains(t, out, card)

	// The console.
	page := consolePage(t, d, tokViewer, fmt.Sprintf("/ui/messages/%d", id))
	requireMasked("the console's message page", page)
	listing := consolePage(t, d, tokViewer, "/ui/messages")
	for _, v := range secrets {
		require.NotContains(t, listing, v, "the console's listing")
	}
	require.Contains(t, consolePage(t, d, tokAdmin, fmt.Sprintf("/ui/messages/%d", id)), card)

	// The control queue: an edit's answer shows its copy masked, the
	// remembered answer of a repeated command too.
	cc, err := control.Dial(context.Background(), dlqtest.AMQPURL(), d.control, tokOperator)
	require.NoError(t, err)
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	// The operator edits what it sees: total fixed, the masked values
	// sent back as placeholders, the authorization header too.
	edited := strings.Replace(masked, `"total": 5`, `"total": 6`, 1)
	b64 := base64.StdEncoding.EncodeToString([]byte(edited))
	cmd := control.Command{Command: control.CmdEditReplay, CommandID: rand.Text(), ID: id, BodyBase64: &b64,
		SetHeaders: json.RawMessage(`{"authorization":"[redacted]","x-fixed":"yes"}`)}
	answer, err := cc.Call(ctx, cmd)
	require.NoError(t, err)
	require.True(t, answer.OK, "%v", answer.Error)
	var res struct {
		Copy struct {
			Headers map[string]any `json:"headers"`
			Body    []byte         `json:"body"`
		} `json:"copy"`
	}
	require.NoError(t, json.Unmarshal(answer.Result, &res))
	require.Equal(t, edited, string(res.Copy.Body), "the copy as the caller may see it")
	require.Equal(t, "[redacted]", res.Copy.Headers["authorization"])
	requireMasked("the control answer", string(answer.Result))
	again, err := cc.Call(ctx, cmd)
	require.NoError(t, err)
	requireMasked("the repeated command's answer", string(again.Result))

	// The copy went out with the real values: it dies again and comes
	// back as a message of its own (the admin reads it).
	ms := d.waitMessages(2)
	copyMsg := ms[0]
	require.Equal(t, strings.Replace(body, `"total": 5`, `"total": 6`, 1), string(copyMsg.Body), "the real values were sent, never the placeholder")
	require.Equal(t, auth, copyMsg.Headers["authorization"])
	require.Equal(t, "yes", copyMsg.Headers["x-fixed"])

	// A placeholder where the message has no value is refused.
	bad := base64.StdEncoding.EncodeToString([]byte(`{"card": {"number": "[redacted]"}, "items": [{"pan": "x"}, {"pan": "y"}, {"pan": "[redacted]"}]}`))
	code, b := d.request(tokOperator, http.MethodPost, fmt.Sprintf("/api/v1/messages/%d/edit-replay", copyMsg.ID), map[string]any{"body_base64": bad, "dry_run": true})
	require.Equal(t, http.StatusBadRequest, code, string(b))
	require.Contains(t, string(b), "$.items[2].pan")

	// A replay sends the real values.
	task := d.replayTo(tokOperator, copyMsg.ID)
	require.EqualValues(t, 1, task["published"], "%v", task)
	got := d.sinkMessages(1)[0]
	require.Equal(t, auth, got.Headers["authorization"])
	require.Contains(t, string(got.Body), card)
	require.Contains(t, string(got.Body), pan2)

	// And nothing masked is in the logs.
	d.stop()
	logs := d.logText()
	for _, v := range secrets {
		require.NotContains(t, logs, v, "the log")
	}
}

// consolePage signs in to the console with token and returns a page.
func consolePage(t *testing.T, d *deployment, token, path string) string {
	t.Helper()
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	c := &http.Client{Jar: jar, Timeout: 30 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	base := "http://" + d.httpAddr
	resp, err := c.PostForm(base+"/ui/sign-in", url.Values{"token": {token}})
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, err = c.Get(base + path)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, string(b))
	return string(b)
}
