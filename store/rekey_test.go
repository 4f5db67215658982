package store_test

import (
	"context"
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
)

// TestRekeyKeepsTheDeathRecordOfOlderRows: a plain row without a death
// record (x_death NULL: stored before migration 00070, or by an older dlq
// during a rolling upgrade, and not yet reached by backfill older_rows)
// has its headers sealed by rekey; its record, which reads derive from the
// plain headers, is written first, so it is not lost with them.
func TestRekeyKeepsTheDeathRecordOfOlderRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	db := dlqtest.DB(t, dsn)
	plain := openStore(t, dsn, nil, nil)
	m := msg("orders", `{}`, 1)
	m.Headers = json.RawMessage(`{"tenant":"acme","x-death":[{"count":{"type":"int64","value":3},"exchange":"orders",` +
		`"queue":"orders","reason":"rejected","routing-keys":["orders.created"],"time":{"type":"timestamp","value":"2026-11-20T10:00:00Z"}}]}`)
	ingest(t, plain, m)
	_, err := db.Exec(ctx, `UPDATE dead_messages SET x_death = NULL`) // as an older dlq stored it
	require.NoError(t, err)

	st := openStore(t, dsn, newRing(t, newKey(t, "k1")), nil)
	res, err := st.RekeyMessages(ctx, rekeyLease(t, st), 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.Sealed)

	var headers string
	require.NoError(t, db.QueryRow(ctx, `SELECT headers::text FROM dead_messages`).Scan(&headers))
	require.NotContains(t, headers, "x-death", "the headers are sealed")
	got, err := st.GetMessage(ctx, 1, nil)
	require.NoError(t, err)
	var deaths []struct {
		Queue string `json:"queue"`
		Count int64  `json:"count"`
	}
	require.NoError(t, json.Unmarshal(got.XDeath, &deaths), "%s", got.XDeath)
	require.Len(t, deaths, 1, "the death record survives sealing: %s", got.XDeath)
	require.Equal(t, "orders", deaths[0].Queue)
	require.EqualValues(t, 3, deaths[0].Count)
	require.Zero(t, count(t, db, `x_death IS NULL`), "backfill older_rows has nothing left to derive from sealed headers")
}
