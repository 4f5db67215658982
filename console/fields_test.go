package console_test

import (
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestFieldFilterForm: without a browser, the messages page reads field
// filters from the address, never takes their count from the summary (65
// messages of orders, 55 match: "more than 50", not 65), carries each
// into the bulk form's hidden inputs, and the confirmation of "all
// matching" counts exactly what they select.
func TestFieldFilterForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(10, "orders")...) // bodies {"order":<n>}: no order.id
	matching := make([]msg, 55)
	for i := range matching {
		matching[i] = msg{queue: "orders", failureType: "X", failureMessage: "y", body: []byte(`{"order":{"id":42}}`)}
	}
	matching[0].body = []byte(`{"order":{"id":42,"tier":"gold"}}`)
	b.seed(t, matching...)
	op := b.signIn(t, tokOp)

	r := op.get(t, "/ui/messages?source_queue=orders&field=order.id%3D42&field=")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Equal(t, 50, strings.Count(r.text, `data-test="message-row"`))
	require.Contains(t, r.text, "More than 50 matching messages", "a field filter is not answered by the summary's 65")
	require.Contains(t, r.text, `<input type="hidden" name="f_field" value="order.id=42">`)
	require.Contains(t, r.text, `value="order.id=42" data-test="field-filter"`)
	require.Contains(t, r.text, "field=order.id%3D42&amp;seen=50", "the next page keeps the filter")

	r = op.act(t, "/ui/confirm", url.Values{"action": {"acknowledge"}, "all": {"1"}, "back": {"/ui/messages"},
		"f_source_queue": {"orders"}, "f_field": {"order.id=42", "order.tier=gold"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, "the confirmation is a page of its own: %s", r.text)
	r = op.follow(t, r)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Contains(t, r.text, "Acknowledge 1 message?", "both field filters reach the confirmation")
	require.Contains(t, r.text, `<input type="hidden" name="f_field" value="order.tier=gold">`)

	r = op.get(t, "/ui/messages?source_queue=orders&field=order.id")
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	require.Contains(t, r.text, `data-test="flash"`)
	require.Contains(t, r.text, "has no operator")
}

// TestConfirmRefusesAReplayTooLarge: a replay the dry run says cannot
// start (more messages than a task takes without a limit) is not offered
// for confirmation: the page says why and what to do. It asked "Replay
// 1,000,000 messages?" and the confirmation only met the refusal.
func TestConfirmRefusesAReplayTooLarge(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.maxTaskMessages = 2 })
	b.seed(t, msg{queue: "orders"}, msg{queue: "orders"}, msg{queue: "orders"})
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/confirm", url.Values{"action": {"replay"}, "all": {"1"}, "back": {"/ui/messages"}, "f_source_queue": {"orders"}})
	if r.StatusCode == http.StatusSeeOther {
		r = op.follow(t, r)
	}
	require.Equal(t, http.StatusBadRequest, r.StatusCode, r.text)
	require.Contains(t, r.text, "This replay cannot start: more than 2 messages match")
	require.Contains(t, r.text, "Narrow the selection")
	require.NotContains(t, r.text, `form method="post" action="/ui/act"`)
}
