package api_test

import (
	"context"
	"crypto/rand"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// sealedSetup is a bundle over a store that seals what it stores
// (encryption at rest), its operations layer holding the key, with the
// real replay service.
func sealedSetup(t *testing.T) *bundle {
	t.Helper()
	secret := make([]byte, crypt.KeySize)
	_, err := rand.Read(secret)
	require.NoError(t, err)
	key, err := crypt.NewKey("k1", secret)
	require.NoError(t, err)
	ring, err := crypt.NewRing([]crypt.Key{key})
	require.NoError(t, err)
	dsn := dlqtest.Schema(t)
	st, err := store.Open(context.Background(), store.Config{DatabaseURL: dsn, MaxConns: 4, Encryption: &store.Encryption{Ring: ring}})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(context.Background(), nil)
	require.NoError(t, err)
	return setup(t, func(o *setupOpts) {
		o.store, o.dsn, o.realReplayer = st, dsn, true
		o.ops = func(c *ops.Config) { c.Ring = ring }
	})
}

// With encryption at rest on, a field filter reads sealed bodies: it is
// refused with a 400 naming field and saying why, by every door (listing,
// total, export, acknowledge, delete, replay), rather than answer an
// empty selection that looks like a real one.
func TestSealedFieldFilterRefused(t *testing.T) {
	t.Parallel()
	b := sealedSetup(t)
	b.seed(t, msg{queue: "orders", failType: "TierError", failText: "no tier", messageID: "gold-1", body: `{"customer":{"tier":"gold"}}`})

	refused := func(r response) {
		t.Helper()
		require.Equal(t, http.StatusBadRequest, r.status, "%s", r.body)
		require.Equal(t, "invalid_parameter", r.errCode(t))
		msg := r.errMessage(t)
		require.Regexp(t, `^field: message bodies are encrypted at rest`, msg)
		require.Contains(t, msg, "cannot be filtered")
	}
	q := url.Values{"source_queue": {"orders"}, "field": {"customer.tier=gold"}}
	refused(b.do(t, "GET", "/api/v1/messages?"+q.Encode(), tokAdmin, nil))
	q.Set("total", "true")
	refused(b.do(t, "GET", "/api/v1/messages?"+q.Encode(), tokAdmin, nil))
	q.Del("total")
	refused(b.do(t, "GET", "/api/v1/messages/export?"+q.Encode(), tokAdmin, nil))
	filter := map[string]any{"source_queue": "orders", "fields": []string{"customer.tier=gold"}}
	refused(b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": filter, "dry_run": true}))
	refused(b.do(t, "POST", "/api/v1/messages/acknowledge", tokOp, map[string]any{"filter": filter}))
	refused(b.do(t, "POST", "/api/v1/messages/delete", tokAdmin, map[string]any{"filter": filter, "dry_run": true}))
	refused(b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"filter": filter, "dry_run": true}))
	refused(b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"filter": filter}))

	// Nothing changed, and the same selection without the field works.
	r := b.do(t, "GET", "/api/v1/messages?source_queue=orders&total=true", tokAdmin, nil)
	require.Equal(t, http.StatusOK, r.status, "%s", r.body)
	var page struct {
		Messages []store.Message
		Total    store.Total
	}
	r.json(t, &page)
	require.Len(t, page.Messages, 1)
	require.Equal(t, "pending", page.Messages[0].Status)
	require.NotNil(t, page.Messages[0].Encryption, "stored sealed")
	require.Zero(t, b.count(t, `SELECT count(*) FROM replay_tasks`))
}
