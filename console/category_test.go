package console_test

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// TestCategoryFilterBar: the messages page takes the category filter as
// the API does, shows it selected, and lists only messages of it.
func TestCategoryFilterBar(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(4, "orders")...)
	_, err := b.db.Exec(context.Background(), `UPDATE dead_messages SET category = 'transient' WHERE id = ANY($1)`, ids[:2])
	require.NoError(t, err)
	admin := b.signIn(t, tokAdmin)
	r := admin.get(t, "/ui/messages?category=transient")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Equal(t, 2, strings.Count(r.text, `data-test="message-row"`), r.text)
	require.Contains(t, r.text, `<option value="transient" selected>transient</option>`)
	r = admin.get(t, "/ui/messages?category=unknown")
	require.Equal(t, 2, strings.Count(r.text, `data-test="message-row"`))
	r = admin.get(t, "/ui/messages?category=flaky")
	require.Contains(t, r.text, `Invalid: Category &#34;flaky&#34; must be one of`, "named by the form's label")
	r = admin.get(t, "/ui/messages?reason=reject")
	require.Contains(t, r.text, `Invalid: Reason &#34;reject&#34; must be one of rejected, expired`, "named by the form's label")

	// Past one page, the count of a category is not the queue summary's
	// (the summary knows no categories): 60 of orders' 64 are transient.
	more := b.seed(t, many(60, "orders")...)
	_, err = b.db.Exec(context.Background(), `UPDATE dead_messages SET category = 'transient' WHERE id = ANY($1)`, more[2:])
	require.NoError(t, err)
	r = admin.get(t, "/ui/messages?source_queue=orders&category=transient")
	require.Equal(t, 50, strings.Count(r.text, `data-test="message-row"`))
	require.Contains(t, r.text, "More than 50 matching messages", "not the summary's 64 as an exact count")
}

// TestSearchIncompleteNotice: while more messages wait for the text index
// than a search reads one by one, the messages page says that its text
// search may miss older matches, and its count is a lower bound.
func TestSearchIncompleteNotice(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seed(t, many(3, "orders")...)
	admin := b.signIn(t, tokAdmin)
	r := admin.get(t, "/ui/messages?q=anything")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.NotContains(t, r.text, `data-test="search-incomplete"`)

	// A range of ids waiting for documents, wider than a search reads.
	_, err := b.db.Exec(context.Background(), `INSERT INTO text_index_queue (lo, hi) VALUES (50000000, $1)`, 50000000+store.TextTailMax+1)
	require.NoError(t, err)
	r = admin.get(t, "/ui/messages?q=anything")
	require.Equal(t, http.StatusOK, r.StatusCode, r.text)
	require.Contains(t, r.text, `data-test="search-incomplete"`)
	require.Contains(t, r.text, "More than 0 matching messages", "a count that may miss matches is not exact")
	r = admin.get(t, "/ui/messages")
	require.NotContains(t, r.text, `data-test="search-incomplete"`, "no q, no text search")
}
