package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestIngestCopyMatchesPgx: ingest's hand-written binary COPY stores the
// same rows as pgx's CopyFrom of the values ingest gave it before, NULLs,
// empty values, arrays and times included, over several chunks of COPY
// data.
func TestIngestCopyMatchesPgx(t *testing.T) {
	t.Parallel()
	st, _ := dlqtest.Store(t)
	now := time.Date(2026, 11, 28, 11, 50, 0, 123456789, time.UTC)
	full := msg("orders", `{"order":42,"text":"parcel held"}`, 7)
	full.MessageID, full.CorrelationID = "m-1", "corr-9"
	full.Failure = json.RawMessage(`{"type":"Boom","message":"it broke"}`)
	full.FailureType, full.FailureMessage = "Boom", "it broke"
	full.XDeath = json.RawMessage(`[{"queue":"orders","reason":"rejected","count":3}]`)
	full.ConversionError = "kept raw: \x00 and \xff"
	full.Category = store.CategoryTransient
	full.ReplayCount, full.Returns, full.DeathCount = 2, 1, 3
	full.FirstFailedAt, full.FailedAt = now.Add(-time.Hour), now
	full.Properties = json.RawMessage(`{"content_type":"application/json"}`)
	full.ContentType, full.ContentKnown = "application/json", true
	bare := store.NewMessage{DeadLetterQueue: "dlq", Reason: "unknown", Properties: json.RawMessage(`{}`),
		Headers: json.RawMessage(`{}`), FailedAt: now, FirstFailedAt: now, Returns: store.ReturnsUnknown}
	binary := msg("payments", "", 9)
	binary.Body = []byte{0, 1, 2, 0xff}
	binary.SourceQueue = "pay\x00ments\xfe"
	binary.Headers = json.RawMessage(`{"tenant":"acme","x-death":[]}`)
	long := msg("orders", strings.Repeat("é", 800), 11)
	before := time.Date(1999, 12, 31, 23, 59, 59, 999999000, time.UTC)
	long.FirstFailedAt, long.FailedAt = before, before
	var msgs []store.NewMessage
	for range 40 { // past several of the encoder's chunks
		msgs = append(msgs, full, bare, binary, long)
	}
	onlyHand, onlyPgx, err := store.CopyBothWays(context.Background(), st, msgs)
	require.NoError(t, err)
	require.Zero(t, onlyHand, "rows only the hand-written COPY stored")
	require.Zero(t, onlyPgx, "rows only pgx stored")
}
