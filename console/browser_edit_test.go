package console_test

import (
	"context"
	"maps"
	"net/http"
	"net/url"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestBrowserEditPreviewAndBack: an operator edits a message in the
// browser. The body comes formatted and the failure headers are to be
// dropped by default; the preview shows the diff of body and headers; the
// copy goes out on "Send this copy", back on the message's page, which no
// longer offers Replay. Back and Forward then pass the preview (the answer
// to a POST) without the browser asking to send the form again, and send
// nothing a second time.
func TestBrowserEditPreviewAndBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A","qty":1}`),
		headers: `{"tenant":"t1","x-exception-message":"sku A is discontinued"}`})
	id := strconv.FormatInt(ids[0], 10)
	edits := func() int {
		var n int
		require.NoError(t, b.db.QueryRow(context.Background(),
			`SELECT count(*) FROM audit_log WHERE action = $1`, store.ActionEditReplay).Scan(&n))
		return n
	}
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, "/ui/messages/"+id)
	require.EqualValues(t, 200, tb.submit(t, `[data-test="action-edit"]`))
	body := get(t, tb, chromedp.Evaluate[string](`document.querySelector('[data-test="edit-body"]').value`))
	require.Equal(t, "{\n  \"sku\": \"A\",\n  \"qty\": 1\n}", body, "the body formatted")
	require.True(t, get(t, tb, chromedp.Evaluate[bool](`document.querySelector('[data-test="drop-failure"]').checked`)),
		"the failure headers are dropped unless the operator keeps them")

	tb.do(t, chromedp.SetValue(chromedp.CSS(`[data-test="edit-body"]`), "{\n  \"sku\": \"B\",\n  \"qty\": 1\n}"))
	require.EqualValues(t, 200, tb.submit(t, `[data-test="edit-preview"]`))
	require.Contains(t, tb.texts(t, `[data-test="body-diff"] del`), `"sku": "A",`)
	require.Contains(t, tb.texts(t, `[data-test="body-diff"] ins`), `"sku": "B",`)
	require.Contains(t, tb.texts(t, `[data-test="headers-diff"] del`), `"x-exception-message": "sku A is discontinued"`)
	require.Zero(t, edits(), "a preview sends nothing")

	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "corrected copy")
	require.Equal(t, "/ui/messages/"+id, get(t, tb, chromedp.Evaluate[string](`location.pathname`)))
	require.Zero(t, tb.count(t, `[data-test="action-replay"]`), "the original of an edit offers no Replay")
	require.Equal(t, 1, edits())

	step := func(js, path string) {
		t.Helper()
		tb.do(t, chromedp.Evaluate[chromedp.Void](js))
		tb.eventually(t, 20*time.Second, `location.pathname === `+strconv.Quote(path)+` && document.readyState === "complete" && `+
			`(document.querySelector("main h1") || {textContent: ""}).textContent.toLowerCase().includes("message `+id+`")`,
			"after "+js+": the page "+path+", shown without a resubmission page")
	}
	step("history.back()", "/ui/messages/"+id+"/edit")
	step("history.back()", "/ui/messages/"+id+"/edit")
	step("history.back()", "/ui/messages/"+id)
	step("history.forward()", "/ui/messages/"+id+"/edit")
	step("history.forward()", "/ui/messages/"+id+"/edit")
	step("history.forward()", "/ui/messages/"+id)
	require.Equal(t, 1, edits(), "nothing sent a second time")
	tb.quiet(t)
}

// arrivedCopies drains queue and returns, by x-dlq-edited-from, the
// x-dlq-replay-id of each edited copy that arrived there.
func arrivedCopies(t *testing.T, app *amqp.Connection, queue string) map[int64]string {
	t.Helper()
	ch := dlqtest.Channel(t, app)
	out := map[int64]string{}
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			return out
		}
		from, ok := d.Headers["x-dlq-edited-from"].(int64)
		require.True(t, ok, "x-dlq-edited-from is %T %v", d.Headers["x-dlq-edited-from"], d.Headers["x-dlq-edited-from"])
		rid, ok := d.Headers["x-dlq-replay-id"].(string)
		require.True(t, ok, "x-dlq-replay-id is %T", d.Headers["x-dlq-replay-id"])
		out[from] = rid
	}
}

// TestBrowserEditSendsThePreviewedReplayID: the replay id the edit's
// preview shows is the x-dlq-replay-id of the copy that arrives at the
// queue, and the one the flash names. The id is derived by the server
// from the message and its edits so far, not from the edit's content
// (which may hold masked values): previews of the message show the same
// id, another message another one, and a form whose replay_id was changed
// (or a send after the message was edited) is refused, 409, and sends
// nothing.
func TestBrowserEditSendsThePreviewedReplayID(t *testing.T) {
	t.Parallel()
	q, app := sourceQueue(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	ids := b.seed(t, msg{queue: q, body: []byte(`{"sku":"A"}`)}, msg{queue: q, body: []byte(`{"sku":"B"}`)})
	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	copies := map[int64]string{}
	arrived := func(id int64) string {
		t.Helper()
		dlqtest.Eventually(t, 20*time.Second, func() bool {
			maps.Copy(copies, arrivedCopies(t, app, q))
			return copies[id] != ""
		}, "the copy of message %d on %s", id, q)
		return copies[id]
	}
	preview := func(body string) string {
		t.Helper()
		tb.do(t, chromedp.SetValue(chromedp.CSS(`[data-test="edit-body"]`), body))
		require.EqualValues(t, 200, tb.submit(t, `[data-test="edit-preview"]`))
		shown := tb.texts(t, `[data-test="copy-replay-id"]`)
		require.Len(t, shown, 1)
		return shown[0]
	}

	first := strconv.FormatInt(ids[0], 10)
	tb.open(t, "/ui/messages/"+first+"/edit")
	other := preview(`{"sku":"A3"}`)
	shown := preview(`{"sku":"A2"}`)
	require.Regexp(t, `^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`, shown)
	require.Equal(t, other, shown, "the id follows the message and its edits, not the edit's content")
	require.Equal(t, shown, preview(`{"sku":"A2"}`), "the same edit previewed again keeps the id")
	// A change after the preview: only a new preview may send it.
	tb.do(t, chromedp.SendKeys(chromedp.CSS(`[data-test="edit-body"]`), " "))
	require.True(t, get(t, tb, chromedp.Evaluate[bool](`document.querySelector('[data-test="confirm"]').disabled`)),
		"a draft changed since its preview could be sent unseen")
	require.Len(t, tb.texts(t, `[data-test="preview-stale"]`), 1)
	require.Equal(t, shown, preview(`{"sku":"A2"}`))
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "copy "+shown, "the flash names the id previewed")
	require.Equal(t, shown, arrived(ids[0]), "the copy carries the id previewed")

	tb.quiet(t) // the 409s below are logged by the page as failed loads

	// The second message's form, its replay_id changed to the first
	// copy's (or anything) after the preview: the send is refused.
	second := strconv.FormatInt(ids[1], 10)
	tb.open(t, "/ui/messages/"+second+"/edit")
	for _, tampered := range []string{shown, "not-a-uuid"} {
		require.NotEqual(t, shown, preview(`{"sku":"B2"}`))
		tb.do(t, chromedp.Evaluate[chromedp.Void](`document.querySelector('input[name="replay_id"]').value = `+strconv.Quote(tampered)))
		require.EqualValues(t, http.StatusConflict, tb.submit(t, `[data-test="confirm"]`), "replay_id %s", tampered)
		require.Contains(t, tb.flash(t), "the message changed since the preview: preview again")
		require.NotContains(t, tb.flash(t), "message "+first, "no other message named")
		require.Equal(t, store.StatusPending, b.statuses(t, ids[1:])[ids[1]], "nothing sent")
	}
	// A send without a preview, asking for the first copy's id, the same.
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/messages/"+second+"/edit", url.Values{"body": {`{"sku":"B2"}`}, "binary": {"0"},
		"send": {"1"}, "replay_id": {shown}})
	require.Equal(t, http.StatusConflict, r.StatusCode, r.text)
	require.Contains(t, r.text, "preview again")
	require.Equal(t, store.StatusPending, b.statuses(t, ids[1:])[ids[1]])
	require.Equal(t, shown, arrived(ids[0]))
	require.NotContains(t, copies, ids[1], "nothing of the second message arrived")
}

// TestBrowserEditCopyLinks: a message dies, is edited, and its corrected
// copy dies too and is stored: the copy's page says it is the edited copy
// of the original and links to it, and the original's page links to the
// copy.
func TestBrowserEditCopyLinks(t *testing.T) {
	t.Parallel()
	app := dlqtest.Dial(t)
	b := setup(t, func(o *setupOpts) { o.live = true })
	appQueue, dlqQueue, original := b.diedInItsQueue(t, app, amqp.Table{"tenant": "t1"})
	originalPage := "/ui/messages/" + strconv.FormatInt(original, 10)

	tb := newTab(t, b)
	tb.signIn(t, tokOp)
	tb.open(t, originalPage+"/edit")
	tb.do(t, chromedp.SetValue(chromedp.CSS(`[data-test="edit-body"]`), `{"order":"A-2"}`))
	tb.submit(t, `[data-test="edit-preview"]`)
	tb.submit(t, `[data-test="confirm"]`)
	require.Contains(t, tb.flash(t), "corrected copy")
	require.Zero(t, tb.count(t, `[data-test="edited-from"], [data-test="edited-into"]`), "the copy is not stored yet")
	dlqtest.RejectAll(t, app, appQueue, 1) // the application rejects the copy too
	b.ingestFrom(t, app, dlqQueue)
	var cp int64
	require.NoError(t, b.db.QueryRow(context.Background(), `SELECT id FROM dead_messages WHERE id <> $1`, original).Scan(&cp))
	copyPage := "/ui/messages/" + strconv.FormatInt(cp, 10)

	tb.open(t, copyPage)
	from := tb.texts(t, `[data-test="edited-from"]`)
	require.Len(t, from, 1)
	require.Contains(t, from[0], "Edited copy of message #"+strconv.FormatInt(original, 10))
	require.Zero(t, tb.count(t, `[data-test="edited-into"]`), "the copy was not edited")
	tb.submit(t, `[data-test="edited-from"] a`)
	require.Equal(t, originalPage, get(t, tb, chromedp.Evaluate[string](`location.pathname`)))
	into := tb.texts(t, `[data-test="edited-into"]`)
	require.Len(t, into, 1)
	require.Contains(t, into[0], "Edited into message #"+strconv.FormatInt(cp, 10))
	require.Zero(t, tb.count(t, `[data-test="edited-from"]`), "the original is no edit's copy")
	tb.submit(t, `[data-test="edited-into"] a`)
	require.Equal(t, copyPage, get(t, tb, chromedp.Evaluate[string](`location.pathname`)))
	tb.quiet(t)
}
