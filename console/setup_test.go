package console_test

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/console"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Tokens of every test console, one per role and scope.
const (
	tokAdmin  = "admin-secret-0123456789"
	tokOp     = "operator-secret-0123456789"
	tokScoped = "scoped-operator-secret-0123"
	tokViewer = "viewer-secret-0123456789"
	tokWrong  = "not-a-configured-token-000"
)

// scopedQueue is the only source queue tokScoped sees.
const scopedQueue = "orders"

var testTokens = []auth.Token{
	{Name: "ops", Token: tokOp, Role: auth.RoleOperator},
	{Name: "orders-ops", Token: tokScoped, Role: auth.RoleOperator, Queues: []string{scopedQueue}},
	{Name: "viewer", Token: tokViewer, Role: auth.RoleViewer},
}

// bundle is one isolated console: its own schema, served by the API's
// server as dlq serve does.
type bundle struct {
	st    *store.Store
	dsn   string
	db    *pgxpool.Pool // the test's own pool on st's schema, for SQL (dlqtest.DB)
	srv   *httptest.Server
	ops   *ops.Service
	authn *auth.Authenticator
	seq   atomic.Int64
}

type setupOpts struct {
	tls          bool
	tokens       []auth.Token
	failureRate  float64
	failureBurst int
	// store, when set, is the store to serve, and dsn its database URL.
	store        *store.Store
	dsn          string
	replayer     *replay.Service
	confirmAbove int64
	// approvalAbove is ops.Config.ApprovalAbove (0: off).
	approvalAbove int64
	// live runs the replay service on a broker connection, so replays
	// publish.
	live bool
	// editSensitive is ops.Config.EditSensitiveHeaders.
	editSensitive []string
	// redaction is ops.Config.Redaction.
	redaction ops.Redaction
	// maxTaskMessages is replay.Config.MaxTaskMessages (0: its default).
	maxTaskMessages int64
}

func setup(t *testing.T, opts ...func(*setupOpts)) *bundle {
	t.Helper()
	o := setupOpts{tokens: testTokens, failureRate: -1, confirmAbove: 1000}
	for _, f := range opts {
		f(&o)
	}
	b := &bundle{st: o.store, dsn: o.dsn}
	if b.st == nil {
		b.st, b.dsn = dlqtest.Store(t)
	}
	b.db = dlqtest.DB(t, b.dsn)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	rp := o.replayer
	if rp == nil {
		var conn *broker.Conn
		if o.live {
			var err error
			conn, err = broker.NewConn(broker.ConnConfig{URL: dlqtest.AMQPURL(), Name: "console-test", Logger: log})
			require.NoError(t, err)
			t.Cleanup(conn.Close)
		}
		var err error
		rp, err = replay.New(replay.Config{Store: b.st, Conn: conn, PollInterval: 50 * time.Millisecond, Logger: log, Registerer: prometheus.NewRegistry(),
			MaxTaskMessages: o.maxTaskMessages})
		require.NoError(t, err)
		if o.live {
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); _ = rp.Run(ctx) }()
			t.Cleanup(func() { cancel(); <-done })
		}
	}
	var err error
	b.authn, err = auth.New(auth.Config{AdminToken: tokAdmin, Tokens: o.tokens, RatePerSecond: -1,
		FailureRate: o.failureRate, FailureBurst: o.failureBurst})
	require.NoError(t, err)
	cr, err := cron.New(cron.Config{Store: b.st, Logger: log, Registerer: prometheus.NewRegistry(), Instance: "console-test",
		Schedules: cron.Only(cron.Schedules{})})
	require.NoError(t, err)
	b.ops, err = ops.New(ops.Config{Store: b.st, Replays: rp, Cron: cr, ConfirmAbove: o.confirmAbove, ApprovalAbove: o.approvalAbove,
		EditSensitiveHeaders: o.editSensitive, Redaction: o.redaction, Principals: b.authn.Principals, Logger: log})
	require.NoError(t, err)
	con, err := console.New(console.Config{Ops: b.ops, Auth: b.authn, Sessions: b.st, RequestID: api.RequestID,
		Logger: log, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	s, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: b.ops, Auth: b.authn, Mount: map[string]http.Handler{"/ui/": con},
		Logger: log, Gatherer: prometheus.NewRegistry()})
	require.NoError(t, err)
	if o.tls {
		b.srv = httptest.NewTLSServer(s.Handler())
	} else {
		b.srv = httptest.NewServer(s.Handler())
	}
	t.Cleanup(b.srv.Close)
	return b
}

// msg describes a message to seed.
type msg struct {
	queue, failureType, failureMessage string
	reason                             string // default: rejected
	body                               []byte
	headers                            string
	properties                         string // default: JSON content type, persistent
}

// seed stores messages straight through the store (ingest is not what
// these tests are about) and returns their ids in order.
func (b *bundle) seed(t *testing.T, msgs ...msg) []int64 {
	t.Helper()
	now := time.Now().UTC()
	var batch []store.NewMessage
	for _, m := range msgs {
		n := b.seq.Add(1)
		h := m.headers
		if h == "" {
			h = fmt.Sprintf(`{"n":{"type":"int32","value":%d}}`, n)
		}
		body := m.body
		if body == nil {
			body = []byte(fmt.Sprintf(`{"order":%d}`, n))
		}
		var failure json.RawMessage
		if m.failureType != "" {
			failure, _ = json.Marshal(map[string]string{"type": m.failureType, "message": m.failureMessage,
				"stack": m.failureType + ": " + m.failureMessage + "\n  at handler (worker.go:42)", "origin": "test"})
		}
		batch = append(batch, store.NewMessage{Failure: failure,
			MessageID: fmt.Sprintf("m-%d", n), SourceQueue: m.queue, SourceExchange: "", SourceRoutingKey: m.queue,
			DeadLetterQueue: "dlq", Reason: cmp.Or(m.reason, "rejected"), DeathCount: 1,
			FailureType: m.failureType, FailureMessage: m.failureMessage,
			Properties: json.RawMessage(cmp.Or(m.properties, `{"content_type":"application/json","delivery_mode":2}`)), Headers: json.RawMessage(h),
			Body: body, FirstFailedAt: now, FailedAt: now, Fingerprint: n,
		})
	}
	_, err := b.st.IngestBatch(context.Background(), store.IngestBatch{ID: store.NewBatchID(), Consumer: "test", Messages: batch})
	require.NoError(t, err)
	rows, err := b.db.Query(context.Background(), `SELECT id FROM dead_messages ORDER BY id DESC LIMIT $1`, len(msgs))
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append([]int64{id}, ids...)
	}
	require.NoError(t, rows.Err())
	return ids
}

// many is n messages of queue with one failure.
func many(n int, queue string) []msg {
	out := make([]msg, n)
	for i := range out {
		out[i] = msg{queue: queue, failureType: "PaymentDeclined", failureMessage: "declined by issuer"}
	}
	return out
}

// client is a browser-like HTTP client: a cookie jar, no redirects
// followed (the tests look at them), and the console's CSRF token once
// signed in.
type client struct {
	b    *bundle
	http *http.Client
	csrf string
}

func (b *bundle) client() *client {
	jar, _ := cookiejar.New(nil)
	hc := *b.srv.Client() // a copy: the server hands out one shared client
	hc.Jar = jar
	hc.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return &client{b: b, http: &hc}
}

// signIn signs c in with token and reads its CSRF token from the
// overview.
func (b *bundle) signIn(t *testing.T, token string) *client {
	t.Helper()
	c := b.client()
	resp := c.post(t, "/ui/sign-in", url.Values{"token": {token}})
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, resp.text)
	resp = c.get(t, "/ui/")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	m := csrfRe.FindStringSubmatch(resp.text)
	require.NotNil(t, m, "the overview carries the CSRF token")
	c.csrf = m[1]
	return c
}

var csrfRe = regexp.MustCompile(`name="csrf" value="([^"]+)"`)

type response struct {
	*http.Response
	text string
}

func (c *client) do(t *testing.T, req *http.Request) response {
	t.Helper()
	resp, err := c.http.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return response{resp, string(b)}
}

func (c *client) get(t *testing.T, path string) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, c.b.srv.URL+path, nil)
	require.NoError(t, err)
	return c.do(t, req)
}

// post sends a form as a browser would from the console's own page.
func (c *client) post(t *testing.T, path string, form url.Values) response {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, c.b.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", c.b.srv.URL)
	return c.do(t, req)
}

// follow is where a redirect leads: r itself when it is not one, else
// the page at its Location (with the flash the redirect set).
func (c *client) follow(t *testing.T, r response) response {
	t.Helper()
	if r.StatusCode != http.StatusSeeOther {
		return r
	}
	return c.get(t, r.Header.Get("Location"))
}

// act posts form with the session's CSRF token.
func (c *client) act(t *testing.T, path string, form url.Values) response {
	t.Helper()
	f := url.Values{}
	for k, v := range form {
		f[k] = v
	}
	f.Set("csrf", c.csrf)
	return c.post(t, path, f)
}

// statuses reads the status of each id.
func (b *bundle) statuses(t *testing.T, ids []int64) map[int64]string {
	t.Helper()
	out := map[int64]string{}
	for _, id := range ids {
		var s string
		err := b.db.QueryRow(context.Background(), `SELECT status FROM dead_messages WHERE id = $1`, id).Scan(&s)
		if err != nil {
			s = "gone"
		}
		out[id] = s
	}
	return out
}

// storeFilterOrders selects the pending messages of orders.
var storeFilterOrders = store.Filter{SourceQueue: "orders"}

func mustPrincipal(t *testing.T, b *bundle, token string) auth.Principal {
	t.Helper()
	p, err := b.authn.Authenticate(token)
	require.NoError(t, err)
	return p
}

// sourceQueue declares a queue of the test's own on RabbitMQ, deleted at
// the end: seeded messages of that queue replay to it (default exchange,
// routing key = queue).
func sourceQueue(t *testing.T) (string, *amqp.Connection) {
	t.Helper()
	app := dlqtest.Dial(t)
	ch := dlqtest.Channel(t, app)
	q := dlqtest.Name(t, "src")
	_, err := ch.QueueDeclare(q, true, false, false, false, nil)
	require.NoError(t, err)
	dlqtest.DeleteQueues(t, app, q)
	return q, app
}

// arrivedIDs drains queue and returns the x-dlq-id of each message: the
// stored ids that were replayed there.
func arrivedIDs(t *testing.T, app *amqp.Connection, queue string) []int64 {
	t.Helper()
	ch := dlqtest.Channel(t, app)
	var ids []int64
	for {
		d, ok, err := ch.Get(queue, true)
		require.NoError(t, err)
		if !ok {
			return ids
		}
		switch v := d.Headers["x-dlq-id"].(type) {
		case int64:
			ids = append(ids, v)
		default:
			t.Fatalf("x-dlq-id is %T %v", v, v)
		}
	}
}
