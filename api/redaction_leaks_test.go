package api_test

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// redacting serves with redaction below admin.
func redacting(r ops.Redaction) func(*setupOpts) {
	return func(o *setupOpts) {
		r.RevealRole = auth.RoleAdmin
		o.ops = func(c *ops.Config) { c.Redaction = r }
	}
}

// A failure message read from a masked header (x-error-message) is masked
// wherever it shows to a principal below the reveal role: the message's
// failure, the failure groups' pattern and sample, the stats' top groups.
// The failure type, from a header that is not masked, stays readable. The
// reveal role reads them all.
func TestRedactedFailureHeaderMasksFailureText(t *testing.T) {
	t.Parallel()
	b := setup(t, redacting(ops.Redaction{Headers: []string{"X-Error-Message"}}))
	const secret = "4111111111111111"
	id := b.seed(t, msg{queue: "orders", failType: "CardDeclined", failText: "card " + secret + " declined by issuer",
		body: `{"order":1}`, messageID: "m-1"})[0]

	var group string
	for _, c := range []struct {
		token  string
		masked bool
	}{{tokViewer, true}, {tokOp, true}, {tokAdmin, false}} {
		var bodies []string
		for _, path := range []string{fmt.Sprintf("/api/v1/messages/%d", id), "/api/v1/messages?source_queue=orders",
			"/api/v1/groups", "/api/v1/stats"} {
			r := b.do(t, "GET", path, c.token, nil)
			require.Equal(t, http.StatusOK, r.status, "%s: %s", path, r.body)
			bodies = append(bodies, string(r.body))
		}
		var m store.Message
		require.NoError(t, json.Unmarshal([]byte(bodies[0]), &m))
		var f struct{ Type, Message string }
		require.NoError(t, json.Unmarshal(m.Failure, &f))
		require.Equal(t, "CardDeclined", f.Type, "the type's header is not masked")
		var groupList struct{ Groups []store.Group }
		require.NoError(t, json.Unmarshal([]byte(bodies[2]), &groupList))
		groups := groupList.Groups
		require.Len(t, groups, 1)
		group = groups[0].ID
		if !c.masked {
			require.Equal(t, "card "+secret+" declined by issuer", f.Message)
			require.Equal(t, "card <n> declined by issuer", groups[0].Pattern)
			for _, body := range bodies[1:] {
				require.Contains(t, body, secret)
			}
			continue
		}
		require.Equal(t, ops.RedactedValue, f.Message)
		require.Equal(t, ops.RedactedValue, groups[0].Pattern)
		require.Equal(t, ops.RedactedValue, groups[0].SampleMessage)
		require.Equal(t, "CardDeclined", groups[0].FailureType)
		for i, body := range bodies {
			require.NotContains(t, body, secret, "token %s, read %d", c.token, i)
			require.NotContains(t, body, "declined by issuer", "token %s, read %d", c.token, i)
		}
	}
	r := b.do(t, "GET", "/api/v1/groups/"+group, tokViewer, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.NotContains(t, string(r.body), "declined by issuer")
}

// A field filter on a redacted body path, a path inside one or a path
// holding one is refused to a principal below the reveal role, by every
// door that takes a filter: card.number>"41112" would let it find a masked
// card number by halving, with the total. Other paths filter as before;
// the reveal role filters on any.
func TestFieldFilterOnRedactedPathRefused(t *testing.T) {
	t.Parallel()
	b := setup(t, redacting(ops.Redaction{BodyPaths: []string{"card.number"}}), func(o *setupOpts) { o.realReplayer = true })
	b.seed(t, msg{queue: "orders", body: `{"card":{"number":"4111111111111111"},"total":5}`, messageID: "m-1",
		headers: amqp.Table{"tenant": "t1"}})

	list := func(token, field string) response {
		return b.do(t, "GET", "/api/v1/messages?source_queue=orders&total=true&field="+url.QueryEscape(field), token, nil)
	}
	for _, field := range []string{`card.number>"41112"`, `card.number="4111111111111111"`, `card.number?`,
		`card?`, `card.number.last4=1111`, `0.card.number>"4"`, `card.\number>"4"`} {
		r := list(tokViewerB, field)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", field, r.body)
		require.Equal(t, "invalid_parameter", r.errCode(t))
		msg := r.errMessage(t)
		require.True(t, strings.HasPrefix(msg, "field: "), msg)
		require.Contains(t, msg, "redacted for token viewer-bodies")
	}
	for _, field := range []string{`total>1`, `cardholder="x"`, `card\.number=1`} {
		r := list(tokViewerB, field)
		require.Equal(t, http.StatusOK, r.status, "%s: %s", field, r.body)
	}
	r := list(tokAdmin, `card.number<"41112"`)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Contains(t, string(r.body), `"total":{"value":1,"exact":true}`)

	filter := map[string]any{"source_queue": "orders", "fields": []string{`card.number>"41112"`}}
	for _, c := range []struct{ method, path, token string }{
		{"POST", "/api/v1/messages/acknowledge", tokOp},
		{"POST", "/api/v1/messages/delete", tokAdmin},
		{"POST", "/api/v1/replays", tokOp},
	} {
		r := b.do(t, c.method, c.path, c.token, map[string]any{"filter": filter, "dry_run": true})
		if c.token == tokAdmin {
			require.Equal(t, http.StatusOK, r.status, "%s: %s", c.path, r.body)
			continue
		}
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", c.path, r.body)
		require.Contains(t, r.errMessage(t), "redacted for token ops", c.path)
	}
	r = b.do(t, "GET", "/api/v1/messages/export?source_queue=orders&field="+url.QueryEscape(`card.number>"41112"`), tokViewerB, nil)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Contains(t, r.errMessage(t), "redacted for token viewer-bodies")
}

// An edit made from a masked view keeps the real values at masked paths;
// an unkeyed hash of that body would let a masked reader of the answer or
// of the audit log test guesses of them. Neither holds one then; a body
// with nothing masked in it keeps its hash.
func TestEditHashOfMaskedBodyNotShown(t *testing.T) {
	t.Parallel()
	b := setup(t, redacting(ops.Redaction{BodyPaths: []string{"card.number"}}), func(o *setupOpts) { o.realReplayer = true })
	ids := b.seed(t, msg{queue: "orders", body: `{"card":{"number":"4111111111111111"},"total":5}`, messageID: "m-1"},
		msg{queue: "orders", body: `{"total":5}`, messageID: "m-2"})
	edit := func(id int64, body string, dry bool) ops.EditResult {
		r := b.do(t, "POST", fmt.Sprintf("/api/v1/messages/%d/edit-replay", id), tokOp, map[string]any{"body": body, "dry_run": dry})
		require.Contains(t, []int{http.StatusOK, http.StatusAccepted}, r.status, "%s", r.body)
		var res ops.EditResult
		r.json(t, &res)
		return res
	}
	res := edit(ids[0], `{"card":{"number":"[redacted]"},"total":6}`, true)
	require.Equal(t, `{"card":{"number":"[redacted]"},"total":6}`, string(res.Copy.Body))
	require.NotContains(t, res.Diff["body"], "sha256_after", "the dry run's answer")
	res = edit(ids[0], `{"card":{"number":"[redacted]"},"total":6}`, false)
	require.NotContains(t, res.Diff["body"], "sha256_after", "the answer")
	require.NotContains(t, fmt.Sprint(res.Diff), "4111")

	res = edit(ids[1], `{"total":6}`, true)
	require.Contains(t, res.Diff["body"], "sha256_after", "nothing masked in the body: hashed as before")

	var detail string
	require.NoError(t, b.db.QueryRow(t.Context(), `SELECT detail::text FROM audit_log WHERE action = 'edit_replay'`).Scan(&detail))
	require.NotContains(t, detail, "sha256", "the audit row")
	require.Contains(t, detail, `"size_after"`)
}

// TestImportRefusesRedactedExport: an export by a token that reads
// redacted values marks its lines, and an import refuses them (400,
// naming the line), rather than storing "[redacted]" as the message's
// headers and body, which a replay would then publish. The reveal
// role's export imports.
func TestImportRefusesRedactedExport(t *testing.T) {
	t.Parallel()
	src := setup(t, redacting(ops.Redaction{Headers: []string{"X-Card"}}))
	dst := setup(t)
	src.seed(t, msg{queue: "orders", failType: "CardDeclined", failText: "declined", body: `{"order":1}`, messageID: "m-1",
		headers: amqp.Table{"x-card": "4111111111111111"}})

	masked := src.exportLines(t, "source_queue=orders", tokViewerB)
	require.Len(t, masked, 2)
	require.Contains(t, string(masked[0]), `"redacted":true`)
	require.NotContains(t, string(masked[0]), "4111111111111111")
	r := dst.importLines(t, joinLines(masked), tokAdmin)
	require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
	require.Contains(t, r.errMessage(t), "line 1: redacted")
	require.Contains(t, r.errMessage(t), "reveal role")

	revealed := src.exportLines(t, "source_queue=orders", tokAdmin)
	require.NotContains(t, string(revealed[0]), `"redacted"`)
	require.Contains(t, string(revealed[0]), "4111111111111111")
	r = dst.importLines(t, joinLines(revealed), tokAdmin)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
}
