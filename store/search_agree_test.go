package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

// TestSearchSelectsWhatTheListingShows: a search (q) selects the same
// messages whichever way it is asked: the listing, its total, an
// acknowledge's dry run and a replay's preview. A partial number ("took
// 150" against "upstream took 1500ms") matches in none (docs/API.md,
// Search); the whole value matches in all.
func TestSearchSelectsWhatTheListingShows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	st, _ := dlqtest.Store(t)
	var msgs []store.NewMessage
	for i, f := range []struct{ id, typ, text string }{
		{"a-1", "TimeoutError", "upstream took 1500ms"},
		{"a-2", "TimeoutError", "upstream took 87ms"},
		{"b-1", "CardError", "card declined by issuer"},
	} {
		m := msg("orders", `{}`, int64(i+1))
		m.MessageID, m.FailureType, m.FailureMessage = f.id, f.typ, f.text
		m.Failure = json.RawMessage(`{"type":"` + f.typ + `","message":"` + f.text + `"}`)
		msgs = append(msgs, m)
	}
	ingest(t, st, msgs...)
	dlqtest.IndexText(t, st)

	for q, want := range map[string]int64{
		"took 150":        0, // a partial number
		"took 1500ms":     1,
		"TOOK 1500MS":     1,
		"took 87ms":       1,
		"took 8":          0,
		"upstream took":   2, // fixed text: every message of the group
		"declined by iss": 1,
		"1500ms":          1, // a key
	} {
		f := store.Filter{Query: q}
		page, err := st.ListMessages(ctx, f, store.ListOptions{Limit: 10})
		require.NoError(t, err, q)
		require.Len(t, page.Messages, int(want), "listing of q=%q", q)
		total, err := st.CountMessages(ctx, f, store.CountOptions{})
		require.NoError(t, err, q)
		require.Equal(t, store.Total{Value: want, Exact: true}, total, "total of q=%q", q)
		ack, err := st.Acknowledge(ctx, f, store.Actor{Name: "test", Via: "test"}, store.ActionOptions{DryRun: true})
		require.NoError(t, err, q)
		require.Equal(t, want, ack.Matched, "acknowledge dry run of q=%q", q)
		preview, err := st.PreviewReplay(ctx, f, 0, 100, 10, 10)
		require.NoError(t, err, q)
		require.Equal(t, want, preview.Matched, "replay preview of q=%q", q)
	}
}
