package console_test

import (
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// The approvals page: a request waiting for approval is listed with its
// count; its requester sees no decision buttons and is refused if it
// posts one anyway; another principal approves it, and exactly its
// snapshot is acknowledged.
func TestApprovalsPage(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 2 })
	ids := b.seed(t, many(3, "orders")...)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {"orders"},
		"max_id": {strconv.FormatInt(ids[2], 10)}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Contains(t, op.follow(t, r).text, "Approvals page")
	later := b.seed(t, many(1, "orders")...)

	r = op.get(t, "/ui/approvals")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	m := regexp.MustCompile(`data-test="approval-row" data-id="(\d+)"`).FindStringSubmatch(r.text)
	require.NotNil(t, m, r.text)
	id := m[1]
	require.NotContains(t, r.text, `data-test="approve"`, "no buttons on one's own request")
	r = op.act(t, "/ui/approvals/"+id, url.Values{"decision": {"approve"}})
	require.Equal(t, http.StatusForbidden, r.StatusCode, "the requester cannot approve: %s", r.text)

	viewer := b.signIn(t, tokViewer)
	r = viewer.get(t, "/ui/approvals")
	require.NotContains(t, r.text, `data-test="approve"`)
	r = viewer.act(t, "/ui/approvals/"+id, url.Values{"decision": {"approve"}})
	require.Equal(t, http.StatusForbidden, r.StatusCode)

	admin := b.signIn(t, tokAdmin)
	r = admin.get(t, "/ui/approvals")
	require.Contains(t, r.text, `data-test="approve"`)
	r = admin.act(t, "/ui/approvals/"+id, url.Values{"decision": {"approve"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Contains(t, admin.follow(t, r).text, "is approved")
	st := b.statuses(t, append(ids, later...))
	for _, x := range ids {
		require.Equal(t, store.StatusAcknowledged, st[x])
	}
	require.Equal(t, store.StatusPending, st[later[0]], "a message that arrived after the request is not included")
}

// The edit page: the form shows the body formatted; a preview shows
// exactly the copy, as a diff against the original, and changes nothing;
// the failure headers are dropped unless the operator keeps them; an
// invalid edit comes back with the problem; the copy is sent on
// confirmation, compact as the original was, and the original then links
// to it and offers no replay or edit again.
func TestEditPage(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A","qty":1}`),
		headers: `{"tenant":"t1","x-exception-message":"sku A is discontinued","x-exception-stacktrace":"at Orders.Handle"}`})
	id := strconv.FormatInt(ids[0], 10)
	op := b.signIn(t, tokOp)
	r := op.get(t, "/ui/messages/"+id)
	require.Contains(t, r.text, `data-test="action-edit"`)
	require.Contains(t, r.text, `data-test="action-replay"`)
	r = op.get(t, "/ui/messages/"+id+"/edit")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Contains(t, r.text, "{\n  &#34;sku&#34;: &#34;A&#34;,\n  &#34;qty&#34;: 1\n}", "the body formatted")
	require.Contains(t, r.text, `data-test="drop-failure" checked`, "failure headers dropped by default")
	require.Contains(t, r.text, "<code>x-exception-message</code>, <code>x-exception-stacktrace</code>")

	form := url.Values{"binary": {"0"}, "body": {"{\n  \"sku\": \"B\",\n  \"qty\": 1\n}"}, "set_headers": {`{"x-fixed-by":"ops"}`},
		"drop_failure": {"1"}, "send": {"0"}}
	r = op.act(t, "/ui/messages/"+id+"/edit", form)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Contains(t, r.text, "What would be sent")
	require.Contains(t, r.text, `<del>  &#34;sku&#34;: &#34;A&#34;,</del><ins>  &#34;sku&#34;: &#34;B&#34;,</ins>`, "the body's diff")
	require.Contains(t, r.text, `{&#34;sku&#34;:&#34;B&#34;,&#34;qty&#34;:1}`, "sent compact, as the original was")
	require.Contains(t, r.text, `<del>  &#34;x-exception-message&#34;: &#34;sku A is discontinued&#34;,</del>`, "the failure headers dropped")
	require.Contains(t, r.text, `<ins>  &#34;x-fixed-by&#34;: &#34;ops&#34;</ins>`)
	require.Contains(t, r.text, "x-dlq-edited-from")
	require.Equal(t, store.StatusPending, b.statuses(t, ids)[ids[0]], "a preview changes nothing")
	keep := url.Values{"binary": {"0"}, "body": {`{"sku":"A","qty":1}`}, "send": {"0"}, "set_headers": {`{"x-fixed-by":"ops"}`}}
	r = op.act(t, "/ui/messages/"+id+"/edit", keep)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.NotContains(t, r.text, `<del>  &#34;x-exception-message&#34;`, "unticked: the failure headers are kept")

	bad := url.Values{"binary": {"0"}, "body": {`{"sku":}`}, "send": {"0"}}
	r = op.act(t, "/ui/messages/"+id+"/edit", bad)
	require.Equal(t, http.StatusBadRequest, r.StatusCode, r.text)
	require.Contains(t, r.text, "line 1, column")
	locked := url.Values{"binary": {"0"}, "body": {`{"sku":"A"}`}, "remove_headers": {"x-death"}, "send": {"0"}}
	r = op.act(t, "/ui/messages/"+id+"/edit", locked)
	require.Equal(t, http.StatusBadRequest, r.StatusCode, r.text)
	require.Contains(t, r.text, "cannot be edited")

	form.Set("send", "1")
	r = op.act(t, "/ui/messages/"+id+"/edit", form)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Equal(t, "/ui/messages/"+id, r.Header.Get("Location"), "back to the message")
	require.Contains(t, op.follow(t, r).text, "corrected copy")
	r = op.get(t, "/ui/messages/"+id)
	require.Contains(t, r.text, "Edited by ops")
	require.NotContains(t, r.text, `data-test="action-replay"`, "the original of an edit offers no replay")
	require.NotContains(t, r.text, `data-test="action-edit"`)
	require.Contains(t, r.text, `data-test="action-ack"`)
	require.Contains(t, r.text, `data-test="edit-event"`, "the edit is on the timeline")
	r = op.act(t, "/ui/messages/"+id+"/edit", form)
	require.Equal(t, http.StatusConflict, r.StatusCode, "one edit at a time: %s", r.text)

	viewer := b.signIn(t, tokViewer)
	r = viewer.get(t, "/ui/messages/"+id)
	require.NotContains(t, r.text, `data-test="action-edit"`)
	require.NotContains(t, r.text, `data-test="action-replay"`)
	r = viewer.act(t, "/ui/messages/"+id+"/edit", form)
	require.Equal(t, http.StatusForbidden, r.StatusCode)
}

// A message with no content type whose body is text (JSON, as publishers
// that set no content type often send) is edited as text, and the copy
// carries the edited bytes: the console sends them as bytes, which the
// layer takes for any content type (as text it refused them).
func TestEditTextBodyWithoutContentType(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A"}`), properties: `{"delivery_mode":2}`})
	id := strconv.FormatInt(ids[0], 10)
	op := b.signIn(t, tokOp)
	r := op.get(t, "/ui/messages/"+id+"/edit")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.NotContains(t, r.text, "base64: the body is binary", "shown as text")

	form := url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"0"}}
	r = op.act(t, "/ui/messages/"+id+"/edit", form)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Contains(t, r.text, "What would be sent")
	require.Contains(t, r.text, `&#34;sku&#34;:&#34;B&#34;`, "the edited body")
}

// TestDecidedApprovalPageIsNotRefreshed: a request's own page refreshes
// itself while the request waits; decided, it no longer changes, so its
// page is not refreshed, and the refresh of a page left open when it was
// decided is told it is the last (X-DLQ-Refresh-Done), as a message's
// page is once its edited copy has settled.
func TestDecidedApprovalPageIsNotRefreshed(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1 })
	ids := b.seed(t, many(2, "orders")...)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_source_queue": {"orders"},
		"max_id": {strconv.FormatInt(ids[1], 10)}, "back": {"/ui/messages"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	id := regexp.MustCompile(`data-test="approval-row" data-id="(\d+)"`).FindStringSubmatch(op.get(t, "/ui/approvals").text)
	require.NotNil(t, id)
	page := "/ui/approvals/" + id[1]
	admin := b.signIn(t, tokAdmin)
	require.Contains(t, admin.get(t, page).text, `data-refresh-url="`+page+`" data-live="on"`, "waiting, the page follows it")
	refresh := func() response {
		req, err := http.NewRequest(http.MethodGet, b.srv.URL+page, nil)
		require.NoError(t, err)
		req.Header.Set("X-DLQ-Refresh", "1")
		return admin.do(t, req)
	}
	require.Empty(t, refresh().Header.Get("X-DLQ-Refresh-Done"), "waiting, the refresh goes on")

	r = admin.act(t, page, url.Values{"decision": {"approve"}, "back": {page}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	decided := admin.get(t, page)
	require.Contains(t, decided.text, `data-test="approval-decision"`)
	require.NotContains(t, decided.text, "data-refresh-url", "decided, the page is not refreshed")
	last := refresh()
	require.Equal(t, http.StatusOK, last.StatusCode)
	require.Equal(t, "1", last.Header.Get("X-DLQ-Refresh-Done"), "a page left open stops at the refresh that shows it decided")
	require.Contains(t, last.text, `data-test="approval-decision"`)
}
