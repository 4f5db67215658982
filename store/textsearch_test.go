package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// textMsg is a dead message of queue with a JSON body.
func textMsg(queue, body string, fp int64) store.NewMessage {
	m := msg(queue, body, fp)
	m.Properties = json.RawMessage(`{"content_type":"application/json"}`)
	return m
}

// searchAll pages through a search, limit at a time, and returns the ids
// in the order the pages gave them.
func searchAll(t *testing.T, st *store.Store, f store.Filter, opt store.ListOptions) []int64 {
	t.Helper()
	var ids []int64
	for range 100 {
		page, err := st.ListMessages(context.Background(), f, opt)
		require.NoError(t, err, "q=%q", f.Query)
		for _, m := range page.Messages {
			ids = append(ids, m.ID)
		}
		if !page.HasMore {
			return ids
		}
		opt.Before = page.LastID
	}
	t.Fatalf("q=%q: more than 100 pages", f.Query)
	return nil
}

// TestTextSearchAcrossQueues: q without a source queue finds words of
// bodies, failure types, messages and stacks, and header values, in
// every queue, as phrases and prefixes, newest first in keyset pages;
// never words inside a binary body.
func TestTextSearchAcrossQueues(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()

	body := textMsg("orders", `{"order":42,"note":"parcel quarantined by customs at Rotterdam"}`, 1)
	failure := textMsg("billing", `{"invoice":7}`, 2)
	failure.FailureType = "System.NullReferenceException"
	failure.FailureMessage = "NullReferenceException in InvoiceMapper.Map"
	failure.Failure = json.RawMessage(`{"type":"System.NullReferenceException","message":"NullReferenceException in InvoiceMapper.Map",` +
		`"stack":"at Shop.Billing.InvoiceMapper.Map(Invoice i) in C:\\src\\InvoiceMapper.cs:line 42\n at Shop.Ledger.Compactor.Run()"}`)
	header := textMsg("shipping", `{}`, 3)
	header.Headers = json.RawMessage(`{"x-customer":"Greta Vikander","x-death":[],"nested":{"carrier":"Blue Heron Freight"}}`)
	// Binary bodies: a NUL byte, invalid UTF-8, a binary content type,
	// a compressed body: their words are never indexed.
	nul := msg("orders", "zebrafish\x00zebrafish payload", 4)
	invalid := msg("orders", "\xffzebrafish payload", 5)
	octets := msg("orders", "zebrafish payload", 6)
	octets.Properties = json.RawMessage(`{"content_type":"application/octet-stream"}`)
	gzipped := textMsg("orders", "zebrafish payload", 7)
	gzipped.Properties = json.RawMessage(`{"content_type":"text/plain","content_encoding":"gzip"}`)
	// A body without a content type is text when it is UTF-8.
	untyped := msg("refunds", "the platypus refund", 8)
	_, res := ingest(t, st, body, failure, header, nul, invalid, octets, gzipped, untyped)
	require.Equal(t, 8, res.Inserted)
	ids := messageIDs(t, db, "TRUE")
	bodyID, failureID, headerID, untypedID := ids[0], ids[1], ids[2], ids[7]

	// Seven messages with the same phrase in three queues, for pages.
	var paged []store.NewMessage
	for i := range 7 {
		paged = append(paged, textMsg([]string{"orders", "billing", "audit"}[i%3], fmt.Sprintf(`{"n":%d,"text":"alpha beta gamma"}`, i), int64(100+i)))
	}
	ingest(t, st, paged...)
	pagedIDs := messageIDs(t, db, "id > $1", untypedID)
	require.Equal(t, 15, dlqtest.IndexText(t, st), "every row queued once")
	require.Zero(t, count(t, db, "id IN (SELECT id FROM message_text) AND enc_key_id IS NOT NULL"))

	all := store.Filter{Status: "all"}
	for _, c := range []struct {
		q    string
		want []int64
	}{
		{"quarantined by customs", []int64{bodyID}},                     // a phrase in a body
		{`"parcel QUARANTINED by customs"`, []int64{bodyID}},            // quoted, any case
		{"customs by quarantined", nil},                                 // the words, not the phrase
		{"quarantined customs", nil},                                    // not next to each other
		{"Rotter*", []int64{bodyID}},                                    // a prefix
		{"quarantined by cust*", []int64{bodyID}},                       // a phrase ending in a prefix
		{"NullReferenceException in InvoiceMapper", []int64{failureID}}, // failure message
		{"System.NullReferenceException", []int64{failureID}},           // failure type
		{"Shop.Ledger.Compactor", []int64{failureID}},                   // stack
		{"Compactor", []int64{failureID}},                               // a word of a stack frame
		{"Invoice*", []int64{failureID}},                                // prefix of failure words
		{"Greta Vikander", []int64{headerID}},                           // a header value
		{"heron freight", []int64{headerID}},                            // a header value one table down
		{"platypus", []int64{untypedID}},                                // a body without a content type
		{"zebrafish", nil},                                              // binary bodies are not text
		{"alpha beta", reversed(pagedIDs)},                              // newest first, across queues
		{"gamma*", reversed(pagedIDs)},                                  // the same through a prefix
	} {
		f := all
		f.Query = c.q
		got := searchAll(t, st, f, store.ListOptions{Limit: 3})
		require.Equal(t, c.want, got, "q=%q", c.q)
	}

	// The same words select for bulk actions (one condition, not pages).
	for q, want := range map[string]int64{"quarantined by customs": 1, "alpha beta": 7, "Invoice*": 1, "zebrafish": 0} {
		res, err := st.Acknowledge(ctx, store.Filter{Status: "all", Query: q}, store.Actor{Name: "t"}, store.ActionOptions{DryRun: true})
		require.NoError(t, err)
		require.EqualValues(t, want, res.Matched, "q=%q", q)
	}

	// A caller who may not see bodies does not find body words, and
	// still finds failure text and header values.
	for q, want := range map[string][]int64{"quarantined": nil, "InvoiceMapper": {failureID}, "Vikander": {headerID}} {
		got := searchAll(t, st, store.Filter{Status: "all", Query: q}, store.ListOptions{NoBodySearch: true})
		require.Equal(t, want, got, "q=%q without bodies", q)
	}

	// A row being replayed is left out of the text arms and still found.
	_, err := db.Exec(ctx, `UPDATE dead_messages SET status = 'replaying', claim_owner = 't', claim_expires_at = now() + interval '1 hour' WHERE id = $1`, bodyID)
	require.NoError(t, err)
	require.Equal(t, []int64{bodyID}, searchAll(t, st, store.Filter{Status: "all", Query: "quarantined by customs"}, store.ListOptions{}))
	require.Equal(t, []int64{bodyID}, searchAll(t, st, store.Filter{Status: "replaying", Query: "quarantined by customs"}, store.ListOptions{}))
	require.Empty(t, searchAll(t, st, store.Filter{Query: "quarantined by customs"}, store.ListOptions{}), "pending only")

	// Exact keys still match whole, and a message id is found either way.
	require.Equal(t, []int64{headerID}, searchAll(t, st, store.Filter{Status: "all", Query: "greta vikander"}, store.ListOptions{}))
}

func reversed(ids []int64) []int64 {
	out := make([]int64, len(ids))
	for i, id := range ids {
		out[len(ids)-1-i] = id
	}
	return out
}

// TestBodyTextBytes: what of a body ingest marks as text.
func TestBodyTextBytes(t *testing.T) {
	t.Parallel()
	js := json.RawMessage(`{"content_type":"application/json"}`)
	long := strings.Repeat("é", store.BodyTextMax) // 2 bytes each
	for _, c := range []struct {
		body  string
		props json.RawMessage
		want  int
	}{
		{`{"a":"b"}`, js, 9},
		{`plain`, nil, 5},
		{`plain`, json.RawMessage(`{}`), 5},
		{`plain`, json.RawMessage(`{"content_type":"text/plain; charset=utf-8"}`), 5},
		{`<a/>`, json.RawMessage(`{"content_type":"application/soap+xml"}`), 4},
		{`bytes`, json.RawMessage(`{"content_type":"application/octet-stream"}`), 0},
		{`bytes`, json.RawMessage(`{"content_type":"application/x-protobuf"}`), 0},
		{`bytes`, json.RawMessage(`{"content_type":"text/plain","content_encoding":"gzip"}`), 0},
		{"nul\x00", js, 0},
		{"\xff\xfe", js, 0},
		{"", js, 0},
		{long, js, store.BodyTextMax},           // cut between two characters
		{"x" + long, js, store.BodyTextMax - 1}, // not inside one
	} {
		require.Equal(t, c.want, store.BodyTextBytes([]byte(c.body), c.props), "body %.20q props %s", c.body, c.props)
	}
}

// TestBodyTextFromConverter: ingest answers BodyTextBytes from the
// converter's content type and encoding (NewMessage.ContentKnown) as it
// would from the properties' JSON, including a property that is not
// plain text, which the JSON shows replaced.
func TestBodyTextFromConverter(t *testing.T) {
	t.Parallel()
	for _, c := range []struct{ body, ct, enc string }{
		{`{"a":"b"}`, "application/json", ""},
		{`plain`, "", ""},
		{`plain`, "text/plain; charset=utf-8", ""},
		{`plain`, " TEXT/Plain ", "UTF-8"},
		{`<a/>`, "application/soap+xml", ""},
		{`bytes`, "application/octet-stream", ""},
		{`bytes`, "text/plain", "gzip"},
		{`bytes`, "text/plain", "identity"},
		{`bytes`, "text/plain\x00", ""},
		{`bytes`, "text/\xffplain", ""},
		{`bytes`, "not a type/", ""},
		{"\xff\xfe", "", ""},
		{"", "text/plain", ""},
	} {
		props := broker.PropertiesOf(&amqp.Delivery{ContentType: c.ct, ContentEncoding: c.enc}).AppendJSON(nil)
		m := store.NewMessage{Body: []byte(c.body), Properties: props, ContentType: c.ct, ContentEncoding: c.enc, ContentKnown: true}
		want := store.BodyTextBytes(m.Body, props)
		require.Equal(t, int32(want), store.BodyTextColumn(&m), "body %q content type %q encoding %q", c.body, c.ct, c.enc)
		m.ContentKnown = false
		require.Equal(t, int32(want), store.BodyTextColumn(&m))
	}
}

// TestWordSeparatorsMatchSQL holds the separators q is split on (for a
// trailing prefix) to those of dlq_search_words in migration 00078.
func TestWordSeparatorsMatchSQL(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	seps := store.WordSeparators
	var out string
	require.NoError(t, db.QueryRow(context.Background(), `SELECT dlq_search_words($1)`, "a"+strings.Join(strings.Split(seps, ""), "a")+"a").Scan(&out))
	require.Equal(t, strings.TrimSpace(strings.Repeat("a ", len(seps)+1)), out, "every separator becomes white space")
}

// TestBackfillText: messages stored while text search was off (nothing
// marked as text, nothing queued for the indexer) have their failure
// text found at once (through the groups), and their header values and
// body words once BackfillText has queued them and the indexer has run.
func TestBackfillText(t *testing.T) {
	t.Parallel()
	st, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	var msgs []store.NewMessage
	for i := range 5 {
		m := textMsg("orders", fmt.Sprintf(`{"pet":"wombat","n":%d}`, i), int64(i+1))
		m.Headers = json.RawMessage(`{"x-keeper":"Ottoline Brisk","x-death":[]}`)
		m.FailureType = "ZooError"
		m.FailureMessage = "enclosure gate ajar"
		msgs = append(msgs, m)
	}
	ingest(t, st, msgs...)
	// Rows below the mark without documents (rows of a database that
	// had text search before the mark, whose entries were lost).
	dlqtest.IndexText(t, st)
	_, err := db.Exec(ctx, `UPDATE dead_messages SET body_text_bytes = NULL, search_text = NULL; DELETE FROM text_index_queue; DELETE FROM message_text`)
	require.NoError(t, err)
	find := func(q string) int {
		page, err := st.ListMessages(ctx, store.Filter{Status: "all", Query: q}, store.ListOptions{Limit: 100})
		require.NoError(t, err)
		return len(page.Messages)
	}
	require.Equal(t, 5, find("gate ajar"), "failure text is found through the groups")
	require.Zero(t, find("wombat"))
	require.Zero(t, find("ottoline"), "a word of a header value (the whole value is a key)")

	var before int64
	queued := 0
	for range 10 {
		next, n, err := st.BackfillText(ctx, before, 2)
		require.NoError(t, err)
		queued += n
		if next == 0 {
			break
		}
		before = next
	}
	require.Equal(t, 5, queued)
	require.Equal(t, 5, dlqtest.IndexText(t, st))
	require.Equal(t, 5, count(t, db, "id IN (SELECT id FROM message_text)"))
	require.Equal(t, 5, find("wombat"))
	require.Equal(t, 5, find("ottoline"))
	// Once more: nothing left to queue.
	_, n, err := st.BackfillText(ctx, 0, 100)
	require.NoError(t, err)
	require.Zero(t, n)

	// A row above the indexer's mark is the mark's to index: queued as
	// well, it was indexed twice.
	ingest(t, st, textMsg("orders", `{"pet":"quokka"}`, 9))
	_, n, err = st.BackfillText(ctx, 0, 100)
	require.NoError(t, err)
	require.Zero(t, n, "the new row waits above the mark")
	require.Equal(t, 1, dlqtest.IndexText(t, st))
	require.Equal(t, 1, find("quokka"))
}

// TestSealedRowsHaveNoText: with encryption at rest, a sealed message's
// text is not marked, never gets a document in message_text (and its
// document would be empty anyway), not backfilled, and q does not find
// it by a word.
func TestSealedRowsHaveNoText(t *testing.T) {
	t.Parallel()
	ring := newRing(t, newKey(t, "k1"))
	dsn := dlqtest.Schema(t)
	st := openStore(t, dsn, ring, nil)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	m := sealedMsg("orders", 1)
	m.Body = []byte(`{"note":"parcel ` + marker + ` quarantined"}`)
	ingest(t, st, m)
	_, _, err := st.BackfillText(ctx, 0, 100)
	require.NoError(t, err)

	require.Equal(t, 1, count(t, db, "enc_key_id IS NOT NULL AND body_text_bytes IS NULL AND search_text IS NULL"))
	dlqtest.IndexText(t, st)
	require.Zero(t, count(t, db, "id IN (SELECT id FROM message_text)"), "sealed rows never get a document")
	// Even computed, the sealed row's document has none of its words.
	var doc string
	require.NoError(t, db.QueryRow(ctx, `SELECT dlq_search_document(failure_type, failure_message, failure, search_text, body, body_text_bytes)::text FROM dead_messages`).Scan(&doc))
	for _, w := range []string{"marker", "7b1d", "quarantined", "parcel", "bearer", "declined"} {
		require.NotContains(t, doc, w)
	}
	// q matches sealed messages by whole identifying values only.
	for q, want := range map[string]int{"quarantined": 0, "parcel " + marker: 0, "mid-" + marker: 1} {
		page, err := st.ListMessages(ctx, store.Filter{Status: "all", Query: q}, store.ListOptions{})
		require.NoError(t, err)
		require.Len(t, page.Messages, want, "q=%q", q)
	}

	// Those keys are written with each row, so however many rows wait for
	// the text indexer, such an answer is complete and says so.
	_, err = db.Exec(ctx, `INSERT INTO text_index_queue (lo, hi) VALUES (1000000, $1)`, 1000000+store.TextTailMax+5)
	require.NoError(t, err)
	withText, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2, TextSearch: true,
		Encryption: &store.Encryption{Ring: ring}})
	require.NoError(t, err)
	t.Cleanup(withText.Close)
	page, err := withText.ListMessages(ctx, store.Filter{Status: "all", Query: "mid-" + marker}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	require.False(t, page.TextIncomplete, "a search of keys only waits for no text index")
}

// TestSearchWordsMatchDocument holds the two copies of the punctuation
// rule of migration 00078 together: the document's (which may call only
// pg_catalog functions) and dlq_search_words (which q goes through). It
// also computes the document with pg_catalog alone on the search path,
// as autovacuum's ANALYZE does.
func TestSearchWordsMatchDocument(t *testing.T) {
	t.Parallel()
	_, dsn := dlqtest.Store(t)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	var schema string
	require.NoError(t, db.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema))
	for _, text := range []string{
		"at com.shop.InvoiceMapper.map(InvoiceMapper.java:42)", `{"order":42,"sku":"SKU-7"}`,
		"a.b-c/d:e@f(g)h[i]j{k}l=m,n;o\"p'q<r>s\\t|u#v$w&x*y+z!1?2~3`4^5%6_7", "grüße, 日本語 — “quoted” words",
	} {
		var same bool
		require.NoError(t, db.QueryRow(ctx, `SELECT to_tsvector('simple', dlq_search_words($1)) = dlq_search_document($1, NULL, NULL, NULL, ''::bytea, 0)`, text).Scan(&same))
		require.True(t, same, "%q", text)
	}
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx) //nolint:errcheck // read-only
	_, err = tx.Exec(ctx, `SET LOCAL search_path = pg_catalog`)
	require.NoError(t, err)
	var doc string
	require.NoError(t, tx.QueryRow(ctx, `SELECT `+pgx.Identifier{schema, "dlq_search_document"}.Sanitize()+`('Err', 'a.b', '{"stack":"x.y"}', 'h', convert_to('body text', 'UTF8'), 9)::text`).Scan(&doc))
	require.Equal(t, "'a':2 'b':3 'body':7 'err':1 'h':6 'text':8 'x':4 'y':5", doc)
}

// TestTextSearchOff: with text search off (DLQ_SEARCH_TEXT=false; on by
// default), ingest marks nothing and queues nothing for the indexer, so
// new rows never get a document and q across queues does not find their
// body or header words; a source queue's body scan and the failure
// groups still find what they find.
func TestTextSearchOff(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t)
	ctx := context.Background()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	require.False(t, st.TextSearch())

	m := textMsg("orders", `{"note":"parcel quarantined by customs"}`, 1)
	m.FailureType = "CustomsHold"
	m.FailureMessage = "held at the border"
	_, res := ingest(t, st, m)
	require.Equal(t, 1, res.Inserted)
	var marked int
	require.NoError(t, dlqtest.DB(t, dsn).QueryRow(ctx,
		`SELECT count(*) FROM dead_messages WHERE body_text_bytes IS NOT NULL OR search_text IS NOT NULL`).Scan(&marked))
	require.Zero(t, marked, "nothing marked as text")
	require.Zero(t, count(t, dlqtest.DB(t, dsn), "id IN (SELECT unnest(ids) FROM text_index_queue)"), "nothing queued for the indexer")
	dlqtest.IndexText(t, st)
	require.Zero(t, count(t, dlqtest.DB(t, dsn), "id IN (SELECT id FROM message_text)"))

	all := store.ListOptions{Limit: 10}
	require.Empty(t, searchAll(t, st, store.Filter{Query: "quarantined by customs"}, all), "no body words across queues")
	require.Len(t, searchAll(t, st, store.Filter{Query: "quarantined by customs", SourceQueue: "orders"}, all), 1,
		"a source queue's body scan still finds them")
	require.Len(t, searchAll(t, st, store.Filter{Query: "held at the border"}, all), 1, "failure text through the groups")
}
