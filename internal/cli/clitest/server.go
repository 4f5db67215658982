// Package clitest runs a live dlq API for the tests of the operator
// commands: in-process ones (package cli) and those of the dlq binary
// (cmd/dlq).
package clitest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// Tokens the server accepts.
const (
	AdminToken    = "cli-admin-token"
	ViewerToken   = "cli-viewer-token"
	OperatorToken = "cli-operator-token"
)

// Server runs the real API on a loopback port over a fresh schema with
// a few dead messages (Seeded), and returns its URL, its store, the
// schema's database URL (for dlqtest.DB) and the stored ids.
func Server(t *testing.T) (url string, st *store.Store, dsn string, ids []int64) {
	t.Helper()
	st, dsn, ids = Seeded(t)
	return Serve(t, st, nil), st, dsn, ids
}

// Serve runs the real API over st on a loopback port until the test ends,
// and returns its URL. It takes AdminToken and ViewerToken, and asks for
// confirmation of a filter above three messages. cron, when not nil,
// serves the jobs and alerts routes.
func Serve(t *testing.T, st *store.Store, cron ops.CronViews) string {
	return ServeWith(t, st, cron, nil)
}

// ServeWith is Serve with the operations layer's configuration changed by
// tweak (approval, a replay service, ...). It also takes OperatorToken.
func ServeWith(t *testing.T, st *store.Store, cron ops.CronViews, tweak func(*ops.Config)) string {
	t.Helper()
	authn, err := auth.New(auth.Config{
		AdminToken: AdminToken,
		Tokens: []auth.Token{{Name: "viewer", Token: ViewerToken, Role: auth.RoleViewer},
			{Name: "operator", Token: OperatorToken, Role: auth.RoleOperator}},
	})
	require.NoError(t, err)
	oc := ops.Config{Store: st, ConfirmAbove: 3}
	if cron != nil {
		oc.Cron = cron
	}
	if tweak != nil {
		tweak(&oc)
	}
	operations, err := ops.New(oc)
	require.NoError(t, err)
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: operations, Auth: authn,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	return "http://" + ln.Addr().String()
}

// Seeded opens a store on a fresh schema holding six pending dead
// messages, m-0 to m-5 (TimeoutError: "upstream took <n>ms"): four died
// in orders, two in billing. It returns the store, the schema's database
// URL (for dlqtest.DB) and the messages' ids, oldest first.
func Seeded(t *testing.T) (*store.Store, string, []int64) {
	t.Helper()
	st, dsn := dlqtest.Store(t)
	var batch store.IngestBatch
	batch.ID, batch.Consumer = store.NewBatchID(), "test"
	for i := range 6 {
		queue := "orders"
		if i >= 4 {
			queue = "billing"
		}
		d := &amqp.Delivery{
			MessageId: fmt.Sprintf("m-%d", i), ContentType: "application/json", Body: []byte(fmt.Sprintf(`{"n":%d}`, i)),
			Headers: amqp.Table{
				"x-death":          []any{amqp.Table{"queue": queue, "reason": "rejected", "exchange": "app", "count": int64(1), "time": time.Now().UTC().Truncate(time.Second)}},
				"x-exception-type": "TimeoutError",
				"x-error-message":  fmt.Sprintf("upstream took %dms", 100*i),
			},
		}
		m := consumer.Convert(d, "dlq", time.Now())
		m.Fingerprint = int64(i + 1)
		batch.Messages = append(batch.Messages, m)
	}
	_, err := st.IngestBatch(context.Background(), batch)
	require.NoError(t, err)
	page, err := st.ListMessages(context.Background(), store.Filter{Status: "all"}, store.ListOptions{Limit: 10})
	require.NoError(t, err)
	ids := make([]int64, len(page.Messages))
	for i, m := range page.Messages {
		ids[len(ids)-1-i] = m.ID // oldest first
	}
	return st, dsn, ids
}
