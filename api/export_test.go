package api_test

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// richDelivery is dead message i as RabbitMQ would hand it to dlq: a body
// of one of several kinds (binary with NULs and invalid UTF-8, JSON with
// characters JSON encoders like to escape, empty, large text), every
// basic property, and application headers of every AMQP type.
func richDelivery(queue string, i int) *amqp.Delivery {
	var body []byte
	switch i % 5 {
	case 0:
		body = []byte{0, 1, 2, 0xff, 0xfe, byte(i), '\n', 0x80, byte(i >> 8)}
	case 1:
		body = []byte(fmt.Sprintf(`{"order":{"id":%d},"note":"<a href=\"x\">&amp;</a>","u":"\u2028 ü 😀"}`, i))
	case 2:
		body = []byte{}
	case 3:
		body = []byte(strings.Repeat(fmt.Sprintf("line %d of a longer text body\r\n", i), 40))
	default:
		body = []byte(fmt.Sprintf("%d", i))
	}
	at := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC).Add(time.Duration(i) * time.Second)
	return &amqp.Delivery{
		ContentType: "application/octet-stream", ContentEncoding: "identity", DeliveryMode: 2, Priority: uint8(i % 10),
		CorrelationId: fmt.Sprintf("corr-%d", i), ReplyTo: "replies", Expiration: "60000", MessageId: fmt.Sprintf("%s-msg-%d", queue, i),
		Timestamp: at, Type: "order.created", AppId: "shop",
		Exchange: "dlx", RoutingKey: queue + ".key", Body: body,
		Headers: amqp.Table{
			"x-death": []any{amqp.Table{
				"queue": queue, "reason": "rejected", "exchange": "", "routing-keys": []any{queue},
				"count": int64(1 + i%3), "time": at,
			}},
			"x-first-death-queue": queue, "x-first-death-reason": "rejected", "x-first-death-exchange": "",
			"s": fmt.Sprintf("tenant <%d> & co", i%7), "i8": int8(-i % 128), "u8": uint8(i % 256), "i16": int16(-i),
			"u16": uint16(i), "i32": int32(i * 1000), "u32": uint32(i), "i64": int64(math.MinInt64 + int64(i)),
			"f32": float32(i) / 3, "f64": math.Pi * float64(i), "dec": amqp.Decimal{Scale: 2, Value: int32(i)},
			"ts": at, "bin": []byte{0, byte(i), 0xff}, "yes": i%2 == 0, "nothing": nil,
			"table":            amqp.Table{"n": int16(7), "list": []any{"a", int8(1), nil, []any{uint8(2)}}},
			"x-exception-type": "InvoiceError", "x-error-message": fmt.Sprintf("invoice %d failed", i),
		},
	}
}

// seedRich stores n rich messages of queue through the real conversion and
// ingest path, in batches.
func (b *bundle) seedRich(t *testing.T, queue string, n int) {
	t.Helper()
	const per = 2000
	for from := 0; from < n; from += per {
		batch := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
		for i := from; i < min(n, from+per); i++ {
			m := consumer.Convert(richDelivery(queue, i), "dlq", time.Now().UTC())
			b.seq++
			m.Fingerprint = b.seq
			batch.Messages = append(batch.Messages, m)
		}
		_, err := b.st.IngestBatch(context.Background(), batch)
		require.NoError(t, err)
	}
}

// exportLines exports with query and returns the lines, the last being
// the end line.
func (b *bundle) exportLines(t *testing.T, query, token string) []json.RawMessage {
	t.Helper()
	r := b.do(t, "GET", "/api/v1/messages/export?"+query, token, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	require.Equal(t, "application/x-ndjson", r.header.Get("Content-Type"))
	var lines []json.RawMessage
	for _, l := range bytes.Split(bytes.TrimSuffix(r.body, []byte("\n")), []byte("\n")) {
		lines = append(lines, json.RawMessage(l))
	}
	return lines
}

func (b *bundle) importLines(t *testing.T, body []byte, token string) response {
	t.Helper()
	return b.do(t, "POST", "/api/v1/messages/import", token, body)
}

func joinLines(lines []json.RawMessage) []byte {
	var buf bytes.Buffer
	for _, l := range lines {
		buf.Write(l)
		buf.WriteByte('\n')
	}
	return buf.Bytes()
}

type importAnswer struct {
	Imported int64 `json:"imported"`
	Skipped  int64 `json:"skipped"`
}

func (r response) imported(t *testing.T) importAnswer {
	t.Helper()
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var a importAnswer
	r.json(t, &a)
	return a
}

// replayAll replays every pending message of b to queue and returns the
// deliveries, by their original message id.
func (b *bundle) replayAll(t *testing.T, app *amqp.Connection, queue string, n int) map[string]amqp.Delivery {
	t.Helper()
	r := b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{
		"filter": map[string]any{}, "confirm": true, "target": map[string]any{"exchange": "", "routing_key": queue}})
	require.Equal(t, http.StatusAccepted, r.status, "%s", r.body)
	ch := dlqtest.Channel(t, app)
	ds, err := ch.Consume(queue, "", true, false, false, false, nil)
	require.NoError(t, err)
	out := map[string]amqp.Delivery{}
	timeout := time.After(60 * time.Second)
	for len(out) < n {
		select {
		case d := <-ds:
			out[d.MessageId] = d
		case <-timeout:
			t.Fatalf("%d of %d replayed messages arrived on %s", len(out), n, queue)
		}
	}
	return out
}

// withoutReplayMarks is a delivery's application headers: what replay
// adds (x-dlq-*) left out.
func withoutReplayMarks(h amqp.Table) amqp.Table {
	out := amqp.Table{}
	for k, v := range h {
		if !strings.HasPrefix(k, "x-dlq-") {
			out[k] = v
		}
	}
	return out
}

// Export, import into another dlq, replay from there: the message that
// arrives is the original, byte for byte and type for type, and it equals
// what the first dlq itself replays. Importing twice stores once, and
// importing an export back where it came from stores nothing.
func TestExportImportReplayRoundTrip(t *testing.T) {
	t.Parallel()
	app := dlqtest.Dial(t)
	conn, err := broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "api-export-test"})
	require.NoError(t, err)
	t.Cleanup(conn.Close)
	src := setup(t, replayer(t, conn))
	dst := setup(t, replayer(t, conn))
	const n = 25
	src.seedRich(t, "orders", n)

	lines := src.exportLines(t, "status=all", tokViewerB)
	require.Len(t, lines, n+1)
	var end struct {
		Export struct {
			Count    int64  `json:"count"`
			LastID   *int64 `json:"last_id"`
			Complete bool   `json:"complete"`
		} `json:"export"`
	}
	require.NoError(t, json.Unmarshal(lines[n], &end))
	require.EqualValues(t, n, end.Export.Count)
	require.True(t, end.Export.Complete)
	var first struct {
		ID     int64  `json:"id"`
		Origin string `json:"origin"`
		Body   []byte `json:"body"`
	}
	require.NoError(t, json.Unmarshal(lines[0], &first))
	require.Len(t, first.Origin, 36)
	require.Equal(t, *end.Export.LastID+n-1, first.ID, "newest first")

	a := dst.importLines(t, joinLines(lines), tokAdmin).imported(t)
	require.Equal(t, importAnswer{Imported: n}, a)
	a = dst.importLines(t, joinLines(lines), tokAdmin).imported(t)
	require.Equal(t, importAnswer{Skipped: n}, a, "a second import stores nothing")
	require.EqualValues(t, n, dst.count(t, `SELECT count(*) FROM dead_messages WHERE status = 'pending' AND replay_count = 0`))
	dst.requireCounters(t)

	r := dst.do(t, "GET", fmt.Sprintf("/api/v1/messages?limit=1&q=orders-msg-%d", n-1), tokViewer, nil)
	var page struct{ Messages []store.Message }
	r.json(t, &page)
	require.Len(t, page.Messages, 1, "an imported message is found like any other")
	require.Equal(t, &store.ImportOrigin{Origin: first.Origin, ID: first.ID}, page.Messages[0].ImportedFrom)

	// Back where it came from: every line names a message still stored there.
	back := dst.exportLines(t, "", tokAdmin)
	require.Len(t, back, n+1)
	require.Contains(t, string(back[0]), `"imported_from":{"origin":"`+first.Origin)
	require.Equal(t, importAnswer{Skipped: n}, src.importLines(t, joinLines(back), tokAdmin).imported(t))

	// Replayed from both: the same messages arrive.
	fromSrc, fromDst := dlqtest.Name(t, "from_src"), dlqtest.Name(t, "from_dst")
	ch := dlqtest.Channel(t, app)
	for _, q := range []string{fromSrc, fromDst} {
		_, err := ch.QueueDeclare(q, true, false, false, false, nil)
		require.NoError(t, err)
		dlqtest.DeleteQueues(t, app, q)
	}
	original := src.replayAll(t, app, fromSrc, n)
	imported := dst.replayAll(t, app, fromDst, n)
	for i := range n {
		id := fmt.Sprintf("orders-msg-%d", i)
		want, got := richDelivery("orders", i), imported[id]
		require.Equal(t, want.Body, got.Body, "%s: body bytes", id)
		require.NotNil(t, got.Body)
		for k, v := range want.Headers {
			if k == "x-death" || strings.HasPrefix(k, "x-first-death-") {
				continue
			}
			require.Equal(t, dlqtest.InUTC(v), dlqtest.InUTC(got.Headers[k]), "%s: header %s, value and type", id, k)
		}
		require.Equal(t, []any{want.ContentType, want.ContentEncoding, want.DeliveryMode, want.Priority, want.CorrelationId,
			want.ReplyTo, want.Expiration, want.MessageId, want.Timestamp.Unix(), want.Type, want.AppId},
			[]any{got.ContentType, got.ContentEncoding, got.DeliveryMode, got.Priority, got.CorrelationId,
				got.ReplyTo, got.Expiration, got.MessageId, got.Timestamp.Unix(), got.Type, got.AppId}, "%s: properties", id)
		o := original[id]
		require.Equal(t, withoutReplayMarks(o.Headers), withoutReplayMarks(got.Headers), "%s: as the first dlq replays it", id)
		o.Headers, got.Headers = nil, nil
		o.DeliveryTag, got.DeliveryTag = 0, 0
		o.ConsumerTag, got.ConsumerTag = "", ""
		o.RoutingKey, got.RoutingKey = "", ""
		o.Acknowledger, got.Acknowledger = nil, nil
		require.Equal(t, o, got, "%s: the whole delivery as the first dlq replays it", id)
	}
}

// gzip when the client asks for it; the plain stream otherwise; a cursor
// resumes after the last id received.
func TestExportGzipAndResume(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedRich(t, "orders", 30)
	b.seedRich(t, "billing", 5)
	plain := joinLines(b.exportLines(t, "source_queue=orders", tokViewerB))

	get := func(encoding, query string) *http.Response {
		t.Helper()
		req, err := http.NewRequest("GET", b.srv.URL+"/api/v1/messages/export?"+query, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokViewerB)
		req.Header.Set("Accept-Encoding", encoding)
		resp, err := (&http.Client{Transport: &http.Transport{DisableCompression: true}}).Do(req)
		require.NoError(t, err)
		t.Cleanup(func() { resp.Body.Close() })
		require.Equal(t, http.StatusOK, resp.StatusCode)
		return resp
	}
	resp := get("gzip, deflate", "source_queue=orders")
	require.Equal(t, "gzip", resp.Header.Get("Content-Encoding"))
	zr, err := gzip.NewReader(resp.Body)
	require.NoError(t, err)
	unzipped, err := io.ReadAll(zr)
	require.NoError(t, err)
	require.Equal(t, plain, unzipped)

	resp = get("gzip;q=0, identity", "source_queue=orders")
	require.Empty(t, resp.Header.Get("Content-Encoding"))
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, plain, raw)

	// Cut after ten lines; resume from the tenth line's id.
	lines := bytes.Split(bytes.TrimSuffix(plain, []byte("\n")), []byte("\n"))
	var tenth struct{ ID int64 }
	require.NoError(t, json.Unmarshal(lines[9], &tenth))
	rest := b.exportLines(t, fmt.Sprintf("source_queue=orders&cursor=%d", tenth.ID), tokViewerB)
	require.Equal(t, lines[10:30], toBytes(rest[:20]), "the rest, as the first export had it")
	require.Contains(t, string(rest[20]), `"count":20`)

	// A listing's cursor works as well, for the same filter only.
	r := b.do(t, "GET", "/api/v1/messages?source_queue=orders&limit=10", tokViewerB, nil)
	var page struct {
		NextCursor *string `json:"next_cursor"`
	}
	r.json(t, &page)
	require.Equal(t, lines[10:30], toBytes(b.exportLines(t, "source_queue=orders&cursor="+*page.NextCursor, tokViewerB)[:20]))
	r = b.do(t, "GET", "/api/v1/messages/export?source_queue=billing&cursor="+*page.NextCursor, tokViewerB, nil)
	require.Equal(t, http.StatusBadRequest, r.status)
	require.Contains(t, r.errMessage(t), "cursor")

	// Filters are the listing's; an empty selection is just the end line.
	require.Len(t, b.exportLines(t, "source_queue=nowhere", tokViewerB), 1)
	require.Len(t, b.exportLines(t, "source_queue=orders&field=order.id%3D11", tokViewerB), 2)
	r = b.do(t, "GET", "/api/v1/messages/export?source_queue=orders&limit=5", tokViewerB, nil)
	require.Equal(t, http.StatusBadRequest, r.status, "no limit: an export is everything selected")
}

// TestExportByWordsWaitsForTheTextIndex: an export by words while more
// messages wait for the text index than a search reads is refused (503,
// retry later), not written and ended "complete" without the messages
// whose words the indexer had not reached yet.
func TestExportByWordsWaitsForTheTextIndex(t *testing.T) {
	t.Parallel()
	b := setup(t)
	b.seedRich(t, "orders", 3)
	dlqtest.IndexText(t, b.st)
	require.Len(t, b.exportLines(t, "status=all&q=zebra", tokViewerB), 1, "caught up: an export by words")

	b.exec(t, `INSERT INTO text_index_queue (lo, hi) VALUES (50000000, $1)`, 50000000+store.TextTailMax+1)
	r := b.do(t, "GET", "/api/v1/messages/export?status=all&q=zebra", tokViewerB, nil)
	require.Equal(t, http.StatusServiceUnavailable, r.status, "%s", r.body)
	require.Contains(t, r.errMessage(t), "wait for the text index")
	require.Len(t, b.exportLines(t, "status=all&source_queue=orders", tokViewerB), 4, "without words: exported")
}

func toBytes(lines []json.RawMessage) [][]byte {
	out := make([][]byte, len(lines))
	for i, l := range lines {
		out[i] = l
	}
	return out
}

// A line that cannot be imported fails the request, naming its line
// number, and nothing of the request is stored.
func TestImportRefusesBadLines(t *testing.T) {
	t.Parallel()
	src, dst := setup(t), setup(t)
	src.seedRich(t, "orders", 6)
	lines := src.exportLines(t, "", tokAdmin)
	require.Len(t, lines, 7)
	replace := func(i int, with string) []byte {
		c := slices.Clone(lines)
		c[i] = json.RawMessage(with)
		return joinLines(c)
	}
	var line map[string]any
	require.NoError(t, json.Unmarshal(lines[3], &line))
	edited := func(k string, v any) string {
		c := map[string]any{}
		for kk, vv := range line {
			c[kk] = vv
		}
		if v == nil {
			delete(c, k)
		} else {
			c[k] = v
		}
		out, err := json.Marshal(c)
		require.NoError(t, err)
		return string(out)
	}
	// withReason changes the line's reason in its own text: edited's round
	// trip through float64 breaks the line's int64 headers, which would be
	// refused first. An export line's reason comes before its headers,
	// x_death and death_history, which may hold a reason too.
	withReason := func(v string) string {
		was, err := json.Marshal(map[string]any{"reason": line["reason"]})
		require.NoError(t, err)
		now, err := json.Marshal(map[string]any{"reason": v})
		require.NoError(t, err)
		return string(bytes.Replace(lines[3], bytes.Trim(was, "{}"), bytes.Trim(now, "{}"), 1))
	}
	for name, c := range map[string]struct {
		body []byte
		says string
	}{
		"cut JSON":         {replace(3, string(lines[3][:40])), "line 4: not a JSON export line"},
		"not base64":       {replace(3, edited("body", "%%%")), "line 4:"},
		"no body":          {replace(3, edited("body", nil)), "line 4: not an exported message: no body"},
		"bad headers":      {replace(3, edited("headers", []int{1})), "line 4: headers"},
		"bad typed header": {replace(3, edited("headers", map[string]any{"n": map[string]any{"type": "int8", "value": 300}})), "line 4: headers"},
		"bad origin":       {replace(3, edited("origin", "prod")), "line 4: origin"},
		"bad reason": {replace(3, withReason("Rejected")),
			`line 4: reason "Rejected" is not one of rejected, expired, maxlen, delivery_limit, unknown`},
		"something else":   {replace(5, `{"colour":"blue"}`), "line 6: not an exported message: no id, origin"},
		"a JSON array":     {replace(1, `[1,2]`), "line 2: not a JSON export line"},
		"past a blank one": {append([]byte("\n"), replace(0, `{}`)...), "line 2:"},
	} {
		r := dst.importLines(t, c.body, tokAdmin)
		require.Equal(t, http.StatusBadRequest, r.status, "%s: %s", name, r.body)
		require.Contains(t, r.errMessage(t), c.says, name)
	}
	require.Zero(t, dst.count(t, `SELECT count(*) FROM dead_messages`), "nothing of a refused import is stored")
	require.Zero(t, dst.count(t, `SELECT count(*) FROM audit_log WHERE action = 'import'`))
	require.Zero(t, dst.count(t, `SELECT coalesce(sum(messages), 0) FROM queue_summary`))

	// The same lines, whole, gzip-compressed: imported.
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	_, err := zw.Write(joinLines(lines))
	require.NoError(t, err)
	require.NoError(t, zw.Close())
	req, err := http.NewRequest("POST", dst.srv.URL+"/api/v1/messages/import", &z)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+tokAdmin)
	req.Header.Set("Content-Encoding", "gzip")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode, "%s", got)
	require.JSONEq(t, `{"imported":6,"skipped":0}`, string(got))
	require.EqualValues(t, 1, dst.count(t, `SELECT count(*) FROM audit_log WHERE action = 'import' AND count = 6`))
	dst.requireCounters(t)
}

// 100,000 messages of every kind go from one dlq to another in one export
// streamed straight into one import, and arrive exactly: every stored byte
// of body, properties and headers equal. The second time, every one is
// skipped. Under the race detector (make test) it moves 3,000, still six
// pages of the export (ops.exportPage) and six batches of the import
// (store.importBatchRows): under -race each message costs about 4 ms of
// CPU over the seeding and both passes, and 10,000 took 44 s of it, the
// most of any test in the suite. Run it without -race for the 100,000.
func TestExportImport100k(t *testing.T) {
	if testing.Short() {
		t.Skip("100,000 messages")
	}
	t.Parallel()
	// Text search on, as dlq serve runs by default: the import only queues
	// its rows for the text indexer, which this test does not run.
	src, dst := setup(t), setup(t)
	n := 100_000
	if raceEnabled {
		n = 3_000
	}
	start := time.Now()
	src.seedRich(t, "orders", n/2)
	src.seedRich(t, "billing", n/2)
	t.Logf("seeded %d messages in %s", n, time.Since(start).Round(time.Millisecond))

	stream := func() importAnswer {
		t.Helper()
		start := time.Now()
		req, err := http.NewRequest("GET", src.srv.URL+"/api/v1/messages/export?status=all", nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tokAdmin)
		resp, err := http.DefaultClient.Do(req) // gzip on the wire, unpacked by the client
		require.NoError(t, err)
		defer resp.Body.Close()
		require.Equal(t, http.StatusOK, resp.StatusCode)
		// The export's lines go on as the import's body as they arrive.
		pr, pw := io.Pipe()
		lines := 0
		go func() {
			sc := bufio.NewScanner(resp.Body)
			sc.Buffer(nil, 16<<20)
			for sc.Scan() {
				lines++
				// A failed write is the import's error to report.
				_, _ = pw.Write(sc.Bytes())
				_, _ = pw.Write([]byte{'\n'})
			}
			pw.CloseWithError(sc.Err())
		}()
		post, err := http.NewRequest("POST", dst.srv.URL+"/api/v1/messages/import", pr)
		require.NoError(t, err)
		post.Header.Set("Authorization", "Bearer "+tokAdmin)
		presp, err := http.DefaultClient.Do(post)
		require.NoError(t, err)
		defer presp.Body.Close()
		body, err := io.ReadAll(presp.Body)
		require.NoError(t, err)
		require.Equal(t, http.StatusOK, presp.StatusCode, "%s", body)
		var a importAnswer
		require.NoError(t, json.Unmarshal(body, &a))
		require.Equal(t, n+1, lines, "every message and the end line")
		t.Logf("export streamed into import: %+v in %s", a, time.Since(start).Round(time.Millisecond))
		return a
	}
	require.Equal(t, importAnswer{Imported: int64(n)}, stream())
	require.Equal(t, importAnswer{Skipped: int64(n)}, stream(), "imported twice, stored once")

	var srcSchema, dstSchema string
	require.NoError(t, src.db.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&srcSchema))
	require.NoError(t, dst.db.QueryRow(context.Background(), `SELECT current_schema()`).Scan(&dstSchema))
	var same, kinds int64
	require.NoError(t, dst.db.QueryRow(context.Background(), fmt.Sprintf(`
SELECT count(*), count(DISTINCT length(a.body) %% 7)
FROM %q.dead_messages a JOIN %q.dead_messages b ON b.imported_id = a.id
WHERE a.body = b.body AND a.properties::text = b.properties::text AND a.headers::text = b.headers::text
  AND a.message_id = b.message_id AND a.source_queue = b.source_queue AND a.source_exchange = b.source_exchange
  AND a.source_routing_key = b.source_routing_key AND a.dead_letter_queue = b.dead_letter_queue
  AND a.reason = b.reason AND a.death_count = b.death_count AND a.failure = b.failure
  AND a.failed_at = b.failed_at AND a.first_failed_at = b.first_failed_at AND a.group_id = b.group_id
  AND b.status = 'pending'`, srcSchema, dstSchema)).Scan(&same, &kinds))
	require.EqualValues(t, n, same, "every message stored exactly as in the first dlq")
	require.Greater(t, kinds, int64(3), "bodies of several kinds")
	require.EqualValues(t, n, dst.count(t, `SELECT count(*) FROM dead_messages`))
	dst.requireCounters(t)
}
