package consumer_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	mrand "math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// rawRow is what the raw-storage tests read back.
type rawRow struct {
	body            []byte
	conversionError *string
	headers         string
	sourceQueue     string
	hasFailure      bool
}

func readRaw(t *testing.T, db *pgxpool.Pool, where string, args ...any) rawRow {
	t.Helper()
	var r rawRow
	require.NoError(t, db.QueryRow(context.Background(), `
SELECT body, conversion_error, headers::text, source_queue, failure IS NOT NULL
FROM dead_messages WHERE `+where, args...).Scan(&r.body, &r.conversionError, &r.headers, &r.sourceQueue, &r.hasFailure))
	return r
}

// deepTable nests {"n": …} levels deep around {"leaf": "x"}, and returns
// it with the AMQP encoding of {"deep": it} (single-key tables encode in
// one order only).
func deepTable(levels int) (amqp.Table, []byte) {
	t := amqp.Table{"leaf": "x"}
	enc := []byte{4, 'l', 'e', 'a', 'f', 'S', 0, 0, 0, 1, 'x'}
	for range levels {
		t = amqp.Table{"n": t}
		enc = append(binary.BigEndian.AppendUint32([]byte{1, 'n', 'F'}, uint32(len(enc))), enc...)
	}
	top := append(binary.BigEndian.AppendUint32([]byte{4, 'd', 'e', 'e', 'p', 'F'}, uint32(len(enc))), enc...)
	return t, top
}

// TestUndecodableHeadersAreStoredRaw: headers the AMQP client library
// cannot decode (nested deeper than 32 levels, or more than 8192 entries
// in one table) used to close dlq's connection on every delivery, forever.
// Such a dead letter is stored raw and flagged, its body and the headers'
// AMQP encoding byte for byte; the connection stays up and the next dead
// letter is stored as usual.
func TestUndecodableHeadersAreStoredRaw(t *testing.T) {
	t.Parallel()
	b := setup(t)
	since := b.cons.WorkingSince()

	deep, deepEnc := deepTable(40)
	wide := amqp.Table{}
	for i := range 8300 {
		wide[fmt.Sprintf("k%05d", i)] = int32(i)
	}
	bodies := map[string][]byte{
		"deep":   {0, 0xff, 'd', 'e', 'e', 'p'},
		"wide":   bytes.Repeat([]byte("wide "), 1000),
		"normal": []byte("after the poison"),
	}
	b.publish(t, b.exchange, "k", amqp.Publishing{MessageId: "deep", Headers: amqp.Table{"deep": deep}, Body: bodies["deep"]})
	b.publish(t, b.exchange, "k", amqp.Publishing{MessageId: "wide", Headers: amqp.Table{"wide": wide}, Body: bodies["wide"]})
	b.publish(t, b.exchange, "k", amqp.Publishing{MessageId: "normal", Headers: amqp.Table{"tenant": "acme"}, Body: bodies["normal"]})
	b.waitRows(t, 3, "true")

	for id, body := range bodies {
		r := readRaw(t, b.db, "message_id = $1", id)
		require.Equal(t, sha256.Sum256(body), sha256.Sum256(r.body), "%s: body byte for byte", id)
		if id == "normal" {
			require.Nil(t, r.conversionError, "the next dead letter is converted as usual")
			require.Contains(t, r.headers, `"tenant":"acme"`)
			continue
		}
		require.NotNil(t, r.conversionError, "%s: flagged", id)
		require.Contains(t, *r.conversionError, "cannot decode this message's headers")
		h, err := broker.DecodeHeadersJSON([]byte(r.headers))
		require.NoError(t, err)
		require.Len(t, h, 1, "%s: the headers are the one raw header", id)
		raw, ok := h[broker.HeaderUndecodable].([]byte)
		require.True(t, ok, "%s: %s holds bytes: %.200s", id, broker.HeaderUndecodable, r.headers)
		if id == "deep" {
			require.Equal(t, deepEnc, raw, "the headers' AMQP encoding, byte for byte")
		} else {
			require.Greater(t, len(raw), 8300*11, "every entry of the wide table is kept")
			require.True(t, bytes.Contains(raw, []byte("k08299")))
		}
	}
	require.Equal(t, since, b.cons.WorkingSince(), "no consumer lost its subscription: the connection stayed up")
	b.stop()
	require.Zero(t, dlqtest.QueueDepth(t, b.app, b.queue), "all three acknowledged")
}

// TestForgedDeathQueueIsCut: x-death is written by whoever publishes to the
// dead-letter exchange; a "queue" longer than any AMQP name (255 bytes) is
// cut to fit the store's indexes instead of making PostgreSQL refuse the
// batch, and the headers keep it whole.
func TestForgedDeathQueueIsCut(t *testing.T) {
	t.Parallel()
	b := setup(t)
	long := make([]byte, 20000)
	for i := range long {
		long[i] = byte('a' + mrand.IntN(26)) // incompressible, so no index could take it
	}
	b.publish(t, b.exchange, "k", amqp.Publishing{MessageId: "forged", Body: []byte("forged"), Headers: amqp.Table{
		"x-death": []any{amqp.Table{"queue": string(long), "reason": "rejected", "count": int64(1)}},
	}})
	b.waitRows(t, 1, "message_id = 'forged'")
	r := readRaw(t, b.db, "message_id = 'forged'")
	require.Nil(t, r.conversionError)
	require.Equal(t, string(long[:255]), r.sourceQueue)
	require.Contains(t, r.headers, string(long), "the headers keep the whole value")
}

// refusingStore is the real store, except that PostgreSQL "refuses" (a
// program-limit error, as for a value too large for an index) every batch
// holding a message for which refuse is true.
type refusingStore struct {
	*store.Store
	refuse func(store.NewMessage) bool
}

func (s *refusingStore) IngestBatch(ctx context.Context, b store.IngestBatch) (store.IngestResult, error) {
	for _, m := range b.Messages {
		if s.refuse(m) {
			return store.IngestResult{}, fmt.Errorf("store: batch %d: copy: %w", b.ID,
				&pgconn.PgError{Code: "54000", Message: "index row requires 20032 bytes, maximum size is 8191"})
		}
	}
	return s.Store.IngestBatch(ctx, b)
}

// TestRefusedMessageIsStoredRaw: when PostgreSQL refuses a message, its
// batch is split until the message is alone; the others are stored as
// usual, and it is stored raw — first with its headers and properties
// (failure details dropped), and if that is refused too, its body alone —
// flagged with the refusal, never retried forever, never dropped.
func TestRefusedMessageIsStoredRaw(t *testing.T) {
	t.Parallel()
	st, db, app, ch, exchange, queue := ownPipelineFixture(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()

	// Four messages, one batch (full at four).
	ids := []string{"ok-1", "refused-once", "refused-twice", "ok-2"}
	require.NoError(t, ch.Confirm(false))
	for _, id := range ids {
		dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, exchange, "orders.created", false, false, amqp.Publishing{
			MessageId: id, Body: []byte("body of " + id + "\x00\xff"),
			Headers: amqp.Table{
				"x-death":             []any{amqp.Table{"queue": "orders.work", "reason": "rejected", "count": int64(1)}},
				"x-exception-message": "failed " + id,
			},
		})
		require.NoError(t, err)
		ok, err := dc.WaitContext(ctx)
		require.NoError(t, err)
		require.True(t, ok)
	}
	rs := &refusingStore{Store: st, refuse: func(m store.NewMessage) bool {
		switch m.MessageID {
		case "refused-once":
			return m.ConversionError == ""
		case "refused-twice":
			return m.ConversionError == "" || strings.HasPrefix(m.ConversionError, "stored raw: ")
		}
		return false
	}}
	p := startPipeline(t, rs, exchange, queue, 4, 10, 5*time.Second)
	count := func() int {
		var n int
		require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM dead_messages`).Scan(&n))
		return n
	}
	dlqtest.Eventually(t, 20*time.Second, func() bool { return count() == 4 }, "stored %d of 4", count())
	got := p.scrape(t)
	p.stop()

	for _, id := range []string{"ok-1", "ok-2"} {
		r := readRaw(t, db, "message_id = $1", id)
		require.Nil(t, r.conversionError, "%s: its neighbours' refusal does not touch it", id)
		require.True(t, r.hasFailure)
	}
	once := readRaw(t, db, "message_id = 'refused-once'")
	require.NotNil(t, once.conversionError)
	require.True(t, strings.HasPrefix(*once.conversionError, "stored raw: PostgreSQL refused the converted message"), *once.conversionError)
	require.Contains(t, *once.conversionError, "54000")
	require.Contains(t, once.headers, `"x-exception-message":"failed refused-once"`, "headers kept")
	require.False(t, once.hasFailure, "failure details dropped")
	require.Equal(t, "orders.work", once.sourceQueue)
	require.Equal(t, []byte("body of refused-once\x00\xff"), once.body)

	twice := readRaw(t, db, "body = $1", []byte("body of refused-twice\x00\xff"))
	require.NotNil(t, twice.conversionError)
	require.True(t, strings.HasPrefix(*twice.conversionError, "stored raw (body only): "), *twice.conversionError)
	require.Equal(t, "{}", twice.headers)
	require.Equal(t, "", twice.sourceQueue)

	require.GreaterOrEqual(t, got["dlq_ingest_data_errors_total"], float64(4), "the batch, its halves, and two raw retries")
	require.Equal(t, float64(4), got["dlq_ingest_batch_messages_sum"])
	require.Zero(t, dlqtest.QueueDepth(t, app, queue), "all four acknowledged")
}
