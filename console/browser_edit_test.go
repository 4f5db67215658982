package console_test

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

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
