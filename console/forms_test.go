package console_test

import (
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

var (
	tagRe   = regexp.MustCompile(`<[^>]*>`)
	spaceRe = regexp.MustCompile(`\s+`)
)

// words is a page's text as a reader sees it: no tags, entities read, runs
// of white space as one space.
func words(page string) string {
	return strings.TrimSpace(spaceRe.ReplaceAllString(html.UnescapeString(tagRe.ReplaceAllString(page, " ")), " "))
}

// flashWords is the text of the page's flash ("" without one).
func flashWords(page string) string {
	i := strings.Index(page, `data-test="flash"`)
	if i < 0 {
		return ""
	}
	end := strings.Index(page[i:], "</div>")
	// Its links are inline: no space stands for their tags.
	return words(tagRe.ReplaceAllString(page[i+strings.Index(page[i:], ">")+1:i+end], ""))
}

// confirmPage posts an action's form and returns its confirmation page.
func (c *client) confirmPage(t *testing.T, form url.Values) response {
	t.Helper()
	r := c.act(t, "/ui/confirm", form)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.True(t, strings.HasPrefix(r.Header.Get("Location"), "/ui/confirm?"), r.Header.Get("Location"))
	r = c.follow(t, r)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	return r
}

// TestConfirmCountsWhatChanges: two messages selected, one of them
// acknowledged already: the confirmation counts the one it will change,
// says the other is left as it is, and the result names each apart.
func TestConfirmCountsWhatChanges(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	c := b.signIn(t, tokAdmin)
	first, second := strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[1], 10)
	r := c.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "id": {first}, "back": {"/ui/messages"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Equal(t, store.StatusAcknowledged, b.statuses(t, ids)[ids[0]])

	back := "/ui/messages?source_queue=orders&status=all"
	form := url.Values{"action": {"acknowledge"}, "id": {first, second}, "back": {back}}
	page := words(c.confirmPage(t, form).text)
	require.Contains(t, page, "Acknowledge 1 message?")
	require.Contains(t, page, "The 2 selected messages: 1 to acknowledge.")
	require.Contains(t, page, "1 selected message is left as it is (1 already acknowledged).")
	require.Contains(t, page, "Acknowledge 1 Cancel", "the button counts what changes")

	r = c.act(t, "/ui/act", form)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Equal(t, back, r.Header.Get("Location"))
	r = c.follow(t, r)
	require.Equal(t, "Done: Acknowledged 1 message: message "+second+". 1 was already acknowledged: message "+first+".", flashWords(r.text))
	require.Contains(t, r.text, `<a href="/ui/messages/`+second+`">message `+second+`</a>. 1 was already`)

	// A replay and a delete of the same two: what each leaves, in
	// grammar that fits its count.
	more := b.seed(t, many(1, "orders")...)
	third := strconv.FormatInt(more[0], 10)
	page = words(c.confirmPage(t, url.Values{"action": {"replay"}, "id": {first, third}, "back": {back}}).text)
	require.Contains(t, page, "Replay 1 message?")
	require.Contains(t, page, "1 selected message is left as it is (")
	page = words(c.confirmPage(t, url.Values{"action": {"delete"}, "id": {first, second}, "back": {back}}).text)
	require.Contains(t, page, "Delete 2 messages?")
	require.NotContains(t, page, "left as")
}

// TestConfirmApprovalNoticeAgrees: the confirmation's word on approval
// is what the action then does, with some of the selection acknowledged
// already.
func TestConfirmApprovalNoticeAgrees(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.approvalAbove = 1 })
	ids := b.seed(t, many(2, "orders")...)
	c := b.signIn(t, tokOp)
	first, second := strconv.FormatInt(ids[0], 10), strconv.FormatInt(ids[1], 10)
	r := c.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "id": {first}, "back": {"/ui/messages"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	form := url.Values{"action": {"acknowledge"}, "id": {first, second}, "back": {"/ui/messages"}}
	needed := strings.Contains(c.confirmPage(t, form).text, `data-test="approval-notice"`)
	r = c.follow(t, c.act(t, "/ui/act", form))
	if needed {
		require.True(t, strings.HasPrefix(flashWords(r.text), "Waiting:"), "the notice said it would wait: %s", flashWords(r.text))
	} else {
		require.True(t, strings.HasPrefix(flashWords(r.text), "Done:"), "no notice, so it runs: %s", flashWords(r.text))
	}
}

// TestGroupActionReturnsToFilteredList: an action from the failure
// groups list returns to the list as it was filtered.
func TestGroupActionReturnsToFilteredList(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(2, "orders")...)
	b.seed(t, many(1, "billing")...)
	c := b.signIn(t, tokOp)
	list := "/ui/groups?source_queue=orders&status=pending"
	r := c.get(t, list)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	m := regexp.MustCompile(`name="f_group" value="([^"]+)"`).FindStringSubmatch(r.text)
	require.NotNil(t, m, "the group's actions")
	require.Contains(t, r.text, `name="back" value="`+html.EscapeString(list)+`"`)

	form := url.Values{"action": {"acknowledge"}, "all": {"1"}, "f_group": {html.UnescapeString(m[1])}, "f_status": {"pending"}, "back": {list}}
	r = c.act(t, "/ui/confirm", form)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	confirm, err := url.Parse(r.Header.Get("Location"))
	require.NoError(t, err)
	r = c.act(t, "/ui/act", confirm.Query())
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Equal(t, list, r.Header.Get("Location"), "back to the filtered list")
	require.Contains(t, flashWords(c.follow(t, r).text), "Acknowledged 2 messages")
}

// TestEmptyPageAfterActingGoesBack: acting on every row of the last page
// returns to that page, which has none left: it shows the page before,
// with the action's result, never an impossible range.
func TestEmptyPageAfterActingGoesBack(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(51, "orders")...)
	c := b.signIn(t, tokOp)
	r := c.get(t, "/ui/messages?source_queue=orders")
	m := regexp.MustCompile(`href="([^"]+)" data-test="next-page"`).FindStringSubmatch(r.text)
	require.NotNil(t, m, "a next page")
	last := html.UnescapeString(m[1])
	r = c.get(t, last)
	require.Contains(t, words(r.text), "showing 51 to 51")

	r = c.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "id": {strconv.FormatInt(ids[0], 10)}, "back": {last}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	require.Equal(t, last, r.Header.Get("Location"))
	r = c.get(t, last)
	require.Equal(t, http.StatusSeeOther, r.StatusCode, "an empty page past the first sends to the one before: %s", words(r.text))
	r = c.follow(t, r)
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	page := words(r.text)
	require.NotContains(t, page, "showing 51")
	require.NotContains(t, page, "No message matches")
	require.Contains(t, page, "50 matching messages")
	require.Equal(t, 50, strings.Count(r.text, `data-test="message-row"`))
	require.Contains(t, flashWords(r.text), "Acknowledged 1 message", "the action's result rides along")
}

// TestBodyFieldFiltersNeedBodies: the JSON body field filters are offered
// only to a token that may see bodies (the layer refuses them to any
// other).
func TestBodyFieldFiltersNeedBodies(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(1, "orders")...)
	r := b.signIn(t, tokViewer).get(t, "/ui/messages?source_queue=orders")
	require.Equal(t, http.StatusOK, r.StatusCode)
	for _, ctl := range []string{`data-test="field-filter"`, `data-test="add-field"`, "JSON body fields"} {
		require.NotContains(t, r.text, ctl, "a viewer without bodies is offered %s", ctl)
	}
	r = b.signIn(t, tokOp).get(t, "/ui/messages?source_queue=orders")
	require.Contains(t, r.text, `data-test="field-filter"`)
	require.Contains(t, r.text, `data-test="add-field"`)
}

// TestRefusedFilterKeepsSortAndSize: a refused filter comes back with the
// order and page size the user chose.
func TestRefusedFilterKeepsSortAndSize(t *testing.T) {
	t.Parallel()
	b := setup(t)
	r := b.signIn(t, tokOp).get(t, "/ui/messages?source_queue=orders&failed_after=yesterday&sort=queue&size=100")
	require.Equal(t, http.StatusBadRequest, r.StatusCode)
	require.Contains(t, flashWords(r.text), "Failed after")
	require.Contains(t, r.text, `<option value="queue" selected>`)
	require.Contains(t, r.text, `<option value="100" selected>`)
	require.Contains(t, r.text, `name="failed_after" type="datetime-local" step="1" value="yesterday"`)
}

// TestMessagesPageTakesTheAPILimit: /ui/messages takes the API listing's
// limit when size is absent (size, the selector's, wins), bounded as the
// API bounds it; the page's links keep the size chosen; the API's
// include_body and total change nothing.
func TestMessagesPageTakesTheAPILimit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(120, "orders")...)
	c := b.signIn(t, tokOp)
	rows := func(r response) int { return strings.Count(r.text, `data-test="message-row"`) }
	next := func(r response) string {
		m := nextPageRe.FindStringSubmatch(r.text)
		require.NotNil(t, m, "the page links to the next")
		return html.UnescapeString(m[1])
	}

	r := c.get(t, "/ui/messages?source_queue=orders&limit=100")
	require.Equal(t, http.StatusOK, r.StatusCode, flashWords(r.text))
	require.Equal(t, 100, rows(r), "limit=100 lists 100 rows")
	require.Contains(t, r.text, `<option value="100" selected>`)
	r = c.get(t, next(r))
	require.Equal(t, 20, rows(r), "the next page keeps 100 a page")

	// A size the selector does not offer: kept in the links and the form.
	r = c.get(t, "/ui/messages?source_queue=orders&limit=7")
	require.Equal(t, 7, rows(r))
	require.Contains(t, r.text, `<input type="hidden" name="limit" value="7">`)
	require.Contains(t, r.text, `<option value="" selected>7</option>`)
	n := next(r)
	require.Contains(t, n, "limit=7")
	r = c.get(t, n)
	require.Equal(t, 7, rows(r), "the next page keeps 7 a page")
	require.Contains(t, r.text, `data-test="prev-page"`)
	require.Contains(t, html.UnescapeString(r.text), "limit=7", "the previous and first page keep 7 a page")

	require.Equal(t, 50, rows(c.get(t, "/ui/messages?source_queue=orders&size=50&limit=100")), "size wins over limit")
	require.Equal(t, 100, rows(c.get(t, "/ui/messages?source_queue=orders&size=100")), "size still works alone")
	r = c.get(t, "/ui/messages?source_queue=orders&limit=100&include_body=true&total=true")
	require.Equal(t, http.StatusOK, r.StatusCode, flashWords(r.text))
	require.Equal(t, 100, rows(r), "include_body and total change nothing")

	for _, bad := range []string{"0", "1001", "ten"} {
		r = c.get(t, "/ui/messages?source_queue=orders&limit="+bad)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, "limit=%s", bad)
		require.Contains(t, flashWords(r.text), "Page size", "limit=%s", bad)
		require.Contains(t, flashWords(r.text), "1 to 1000", "limit=%s", bad)
	}
}

var nextPageRe = regexp.MustCompile(`href="([^"]+)" data-test="next-page"`)

// TestBulkFormMistakesReturnToTheForm: a bulk form sent with no row
// ticked, or a delay out of range, returns to its page with what to
// change in the form's words; the delay's input has its bounds.
func TestBulkFormMistakesReturnToTheForm(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(2, "orders")...)
	c := b.signIn(t, tokOp)
	back := "/ui/messages?source_queue=orders"
	r := c.get(t, back)
	require.Contains(t, r.text, `name="delay" min="0" max="604800"`)

	for _, tc := range []struct {
		form url.Values
		want string
	}{
		{url.Values{"action": {"replay"}, "back": {back}}, "Error: Select at least one message, or all matching the filter."},
		{url.Values{"action": {"replay"}, "id": {strconv.FormatInt(ids[0], 10)}, "delay": {"999999"}, "back": {back}},
			"Error: Delay before start (seconds) must be a whole number from 0 to 604800."},
		{url.Values{"action": {"replay"}, "id": {strconv.FormatInt(ids[0], 10)}, "rate": {"-1"}, "back": {back}},
			"Error: Rate (messages per second) must be a whole number from 0 to 100000."},
	} {
		r := c.act(t, "/ui/confirm", tc.form)
		require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
		require.Equal(t, back, r.Header.Get("Location"), "back to the form's page")
		r = c.follow(t, r)
		require.Equal(t, http.StatusOK, r.StatusCode)
		require.Equal(t, tc.want, flashWords(r.text))
		require.Contains(t, r.text, `data-test="message-row"`, "the page itself, with its rows")
	}
	for _, s := range b.statuses(t, ids) {
		require.Equal(t, store.StatusPending, s)
	}
}

// TestEditErrorsInTheFormsWords: the edit page's errors name its fields
// by their labels, not the API's names, and keep the form as sent.
func TestEditErrorsInTheFormsWords(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.editSensitive = []string{"tenant"} })
	ids := b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A"}`), headers: `{"tenant":"t1"}`})
	id := strconv.FormatInt(ids[0], 10)
	op := b.signIn(t, tokOp)
	for _, tc := range []struct {
		form      url.Values
		want, not string
	}{
		{url.Values{"body": {`{"sku":}`}}, "Error: Invalid: New body: the content type is application/json", "Invalid: body:"},
		{url.Values{"body": {`{"sku":"A"}`}, "set_headers": {`{"x-a":`}}, "Error: Invalid: Headers to set:", "set_headers"},
		{url.Values{"body": {`{"sku":"A"}`}, "remove_headers": {"x-death"}}, `Error: Invalid: Headers to remove: header "x-death" cannot be edited`, "remove_headers"},
		{url.Values{"body": {`{"sku":"A"}`}, "set_headers": {`{"tenant":"t2"}`}}, "tick “Change sensitive headers (force)” to change it", "force: true"},
		{url.Values{"body": {`{"sku":"A"}`}, "set_headers": {`{"x-a":"1"}`}, "remove_headers": {"x-a"}}, "is also in Headers to remove", "remove_headers"},
		{url.Values{"body": {`{"sku":"A"}`}}, "nothing to change: change the New body, the Headers to set or the Headers to remove", "body_base64"},
	} {
		tc.form.Set("binary", "0")
		tc.form.Set("send", "0")
		r := op.act(t, "/ui/messages/"+id+"/edit", tc.form)
		require.Equal(t, http.StatusBadRequest, r.StatusCode, r.text)
		got := flashWords(r.text)
		require.Contains(t, got, tc.want)
		require.NotContains(t, got, tc.not)
		require.Contains(t, r.text, `data-test="edit-body"`, "the form is kept")
		require.Contains(t, r.text, html.EscapeString(tc.form.Get("body"))+"</textarea>", "as it was sent")
	}
}
