package api_test

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/getkin/kin-openapi/openapi3filter"
	"github.com/getkin/kin-openapi/routers"
	"github.com/getkin/kin-openapi/routers/gorillamux"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Tokens of every test server, one per role and scope.
const (
	tokAdmin   = "admin-secret-0123456789"
	tokOp      = "operator-secret-0123456789"
	tokScoped  = "scoped-operator-secret-0123"
	tokViewer  = "viewer-secret-0123456789"
	tokViewerB = "viewer-bodies-secret-012345"
	tokWrong   = "not-a-configured-token-000"
)

// scopedQueue is the only source queue tokScoped may see.
const scopedQueue = "orders"

// bundle is one isolated API: its own schema, a real HTTP server around the
// real handler, and the OpenAPI document every response is checked against.
type bundle struct {
	st     *store.Store
	dsn    string
	db     *pgxpool.Pool // the test's own pool on st's schema, for SQL (dlqtest.DB)
	srv    *httptest.Server
	router routers.Router
	// seq makes fingerprints unique within the bundle.
	seq int64
}

type setupOpts struct {
	// store, when set, is the store to serve (its schema already migrated),
	// and dsn its database URL.
	store *store.Store
	dsn   string
	// replayer serves the replay routes; realReplayer gives the replay
	// service over the bundle's store.
	replayer     ops.Replays
	realReplayer bool
	cron         ops.CronViews
	rate         float64
	// failureRate and failureBurst configure the wrong-token throttle;
	// off (-1) unless a test is about it, since most tests send wrong
	// tokens on purpose.
	failureRate  float64
	failureBurst int
	maxBody      int64
	confirmAbove int64
	// ops tweaks the operations layer's configuration. Optional.
	ops func(*ops.Config)
	// log receives the server's log. Optional.
	log io.Writer
	// checks are the readiness checks. Optional.
	checks []api.Check
}

// newReplayer is the real replay service over st: it records, reads and
// cancels tasks in PostgreSQL. Without a connection it never publishes,
// so the tasks it records stay scheduled.
func newReplayer(t *testing.T, st *store.Store) *replay.Service {
	t.Helper()
	svc, err := replay.New(replay.Config{Store: st, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	return svc
}

// replayer runs a real replay service over a fresh store, for a bundle
// that replays into RabbitMQ.
func replayer(t *testing.T, conn *broker.Conn) func(*setupOpts) {
	return func(o *setupOpts) {
		st, dsn := dlqtest.Store(t)
		svc, err := replay.New(replay.Config{Store: st, Conn: conn, PollInterval: 50 * time.Millisecond,
			Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Registerer: prometheus.NewRegistry()})
		require.NoError(t, err)
		o.store, o.dsn, o.replayer = st, dsn, svc
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = svc.Run(ctx) }()
		t.Cleanup(func() { cancel(); <-done })
	}
}

// newOps is the operations layer over st, as dlq serve wires it, with
// tweaks applied.
func newOps(t *testing.T, st *store.Store, replays ops.Replays, cron ops.CronViews, confirmAbove int64, tweaks ...func(*ops.Config)) *ops.Service {
	t.Helper()
	cfg := ops.Config{Store: st, Replays: replays, Cron: cron, ConfirmAbove: confirmAbove,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))}
	for _, tw := range tweaks {
		tw(&cfg)
	}
	o, err := ops.New(cfg)
	require.NoError(t, err)
	return o
}

func opsTweaks(o setupOpts) []func(*ops.Config) {
	if o.ops == nil {
		return nil
	}
	return []func(*ops.Config){o.ops}
}

func setup(t *testing.T, opts ...func(*setupOpts)) *bundle {
	t.Helper()
	o := setupOpts{rate: -1, failureRate: -1, confirmAbove: 1000, log: io.Discard}
	for _, f := range opts {
		f(&o)
	}
	st, dsn := o.store, o.dsn
	if st == nil {
		st, dsn = dlqtest.Store(t)
	}
	if o.realReplayer {
		o.replayer = newReplayer(t, st)
	}
	authn, err := auth.New(auth.Config{
		AdminToken: tokAdmin,
		Tokens: []auth.Token{
			{Name: "ops", Token: tokOp, Role: auth.RoleOperator},
			{Name: "orders-ops", TokenSHA256: auth.Digest(tokScoped), Role: auth.RoleOperator, Queues: []string{scopedQueue}},
			{Name: "viewer", Token: tokViewer, Role: auth.RoleViewer},
			{Name: "viewer-bodies", Token: tokViewerB, Role: auth.RoleViewer, Bodies: true},
		},
		RatePerSecond: o.rate,
		FailureRate:   o.failureRate,
		FailureBurst:  o.failureBurst,
	})
	require.NoError(t, err)
	s, err := api.New(api.Config{
		Addr: "127.0.0.1:0", Ops: newOps(t, st, o.replayer, o.cron, o.confirmAbove, opsTweaks(o)...), Auth: authn,
		MaxBodyBytes: o.maxBody,
		Checks:       o.checks,
		Logger:       slog.New(slog.NewTextHandler(o.log, nil)),
		Gatherer:     prometheus.NewRegistry(),
	})
	require.NoError(t, err)
	srv := httptest.NewServer(s.Handler())
	t.Cleanup(srv.Close)

	return &bundle{st: st, dsn: dsn, db: dlqtest.DB(t, dsn), srv: srv, router: openAPIRouter(t, srv.URL)}
}

// openAPIDoc loads and validates api/openapi.yaml.
func openAPIDoc(t *testing.T) *openapi3.T {
	t.Helper()
	doc, err := openapi3.NewLoader().LoadFromData(api.OpenAPI)
	require.NoError(t, err)
	require.NoError(t, doc.Validate(context.Background()), "the OpenAPI document itself is invalid")
	return doc
}

// openAPIRouter routes requests to a server at url to the document's
// operations.
func openAPIRouter(t *testing.T, url string) routers.Router {
	t.Helper()
	doc := openAPIDoc(t)
	doc.Servers = openapi3.Servers{{URL: url}}
	router, err := gorillamux.NewRouter(doc)
	require.NoError(t, err)
	return router
}

// response is what a request got.
type response struct {
	status int
	header http.Header
	body   []byte
}

func (r response) json(t *testing.T, v any) {
	t.Helper()
	require.NoError(t, json.Unmarshal(r.body, v), "decode %s", r.body)
}

// errCode returns the envelope's error code (failing if the body is not an
// envelope).
func (r response) errCode(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		} `json:"error"`
		RequestID string `json:"request_id"`
	}
	r.json(t, &e)
	require.NotEmpty(t, e.Error.Code, "no error envelope in %s", r.body)
	require.Equal(t, r.header.Get("X-Request-Id"), e.RequestID)
	return e.Error.Code
}

func (r response) errMessage(t *testing.T) string {
	t.Helper()
	var e struct {
		Error struct{ Message string } `json:"error"`
	}
	r.json(t, &e)
	return e.Error.Message
}

// do sends a request and checks, for every response, the X-Request-Id
// header and conformance with the OpenAPI document (for documented
// routes). body is JSON-encoded unless it is a string or []byte.
func (b *bundle) do(t *testing.T, method, path, token string, body any) response {
	t.Helper()
	var raw []byte
	switch v := body.(type) {
	case nil:
	case string:
		raw = []byte(v)
	case []byte:
		raw = v
	default:
		var err error
		raw, err = json.Marshal(v)
		require.NoError(t, err)
	}
	var rd io.Reader
	if raw != nil {
		rd = bytes.NewReader(raw)
	}
	req, err := http.NewRequest(method, b.srv.URL+path, rd)
	require.NoError(t, err)
	if raw != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	got, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NotEmpty(t, resp.Header.Get("X-Request-Id"), "%s %s: no X-Request-Id", method, path)
	conform(t, b.router, req, raw, resp, got)
	return response{status: resp.StatusCode, header: resp.Header, body: got}
}

// conform validates a real response against the OpenAPI document.
func conform(t *testing.T, router routers.Router, req *http.Request, reqBody []byte, resp *http.Response, body []byte) {
	t.Helper()
	route, params, err := router.FindRoute(req)
	if err != nil {
		// Not a documented route or method: it must be an enveloped 404/405.
		require.Contains(t, []int{http.StatusNotFound, http.StatusMethodNotAllowed}, resp.StatusCode,
			"%s %s is not in the OpenAPI document but answered %d", req.Method, req.URL, resp.StatusCode)
		return
	}
	if reqBody != nil {
		req.Body = io.NopCloser(bytes.NewReader(reqBody))
	}
	in := &openapi3filter.ResponseValidationInput{
		RequestValidationInput: &openapi3filter.RequestValidationInput{
			Request: req, PathParams: params, Route: route,
			Options: &openapi3filter.Options{AuthenticationFunc: openapi3filter.NoopAuthenticationFunc},
		},
		Status: resp.StatusCode,
		Header: resp.Header,
		Options: &openapi3filter.Options{
			IncludeResponseStatus: true,
			MultiError:            true,
		},
	}
	in.SetBodyBytes(body)
	err = openapi3filter.ValidateResponse(context.Background(), in)
	require.NoError(t, err, "%s %s -> %d does not match the OpenAPI document:\n%.2000s", req.Method, req.URL, resp.StatusCode, body)
}

// msg describes a dead message to seed.
type msg struct {
	queue, reason string
	// exchange is the exchange the message was first published to;
	// default "app".
	exchange           string
	failType, failText string
	messageID          string
	body               string
	headers            amqp.Table
	failedAt           time.Time
}

// delivery builds the delivery RabbitMQ would hand dlq for m: the x-death
// record plus the failure headers a generic client sets.
func delivery(m msg) *amqp.Delivery {
	h := amqp.Table{}
	for k, v := range m.headers {
		h[k] = v
	}
	reason := m.reason
	if reason == "" {
		reason = "rejected"
	}
	exchange := cmp.Or(m.exchange, "app")
	h["x-death"] = []any{amqp.Table{
		"queue": m.queue, "reason": reason, "exchange": exchange, "routing-keys": []any{m.queue + ".key"},
		"count": int64(1), "time": time.Now().UTC().Truncate(time.Second),
	}}
	h["x-first-death-queue"], h["x-first-death-reason"], h["x-first-death-exchange"] = m.queue, reason, exchange
	if m.failType != "" {
		h["x-exception-type"] = m.failType
	}
	if m.failText != "" {
		h["x-error-message"] = m.failText
	}
	return &amqp.Delivery{
		Headers: h, ContentType: "application/json", MessageId: m.messageID, Body: []byte(m.body),
		DeliveryMode: 2, Exchange: "dlx", RoutingKey: m.queue + ".key",
	}
}

// seed stores messages through the real conversion and ingest path, in one
// batch, and returns their ids in order.
func (b *bundle) seed(t *testing.T, ms ...msg) []int64 {
	t.Helper()
	batch := store.IngestBatch{ID: store.NewBatchID(), Consumer: "test"}
	for _, m := range ms {
		at := m.failedAt
		if at.IsZero() {
			at = time.Now().UTC()
		}
		nm := consumer.Convert(delivery(m), "dlq", at)
		b.seq++
		nm.Fingerprint = b.seq
		batch.Messages = append(batch.Messages, nm)
	}
	ctx := context.Background()
	var before int64
	require.NoError(t, b.db.QueryRow(ctx, `SELECT coalesce(max(id), 0) FROM dead_messages`).Scan(&before))
	_, err := b.st.IngestBatch(ctx, batch)
	require.NoError(t, err)
	rows, err := b.db.Query(ctx, `SELECT id FROM dead_messages WHERE id > $1 ORDER BY id`, before)
	require.NoError(t, err)
	var ids []int64
	for rows.Next() {
		var id int64
		require.NoError(t, rows.Scan(&id))
		ids = append(ids, id)
	}
	require.NoError(t, rows.Err())
	require.Len(t, ids, len(ms))
	return ids
}

// many returns n messages of queue with varied failures.
func many(queue string, n int) []msg {
	out := make([]msg, n)
	for i := range out {
		out[i] = msg{
			queue: queue, failType: "TimeoutError",
			failText:  fmt.Sprintf("upstream took %dms", 1000+i),
			messageID: fmt.Sprintf("%s-%04d", queue, i),
			body:      fmt.Sprintf(`{"order":%d}`, i),
			headers:   amqp.Table{"tenant": fmt.Sprintf("tenant-%d", i%3)},
		}
	}
	return out
}

func (b *bundle) exec(t *testing.T, sql string, args ...any) {
	t.Helper()
	_, err := b.db.Exec(context.Background(), sql, args...)
	require.NoError(t, err)
}

func (b *bundle) count(t *testing.T, sql string, args ...any) int64 {
	t.Helper()
	var n int64
	require.NoError(t, b.db.QueryRow(context.Background(), sql, args...).Scan(&n))
	return n
}

// list pages through GET path to the end and returns every message id.
func (b *bundle) listAll(t *testing.T, path, token string) []int64 {
	t.Helper()
	var ids []int64
	sep := "?"
	if strings.Contains(path, "?") {
		sep = "&"
	}
	url := path
	for range 10000 {
		r := b.do(t, "GET", url, token, nil)
		require.Equal(t, http.StatusOK, r.status, "%s", r.body)
		var page struct {
			Messages   []store.Message `json:"messages"`
			NextCursor *string         `json:"next_cursor"`
			HasMore    bool            `json:"has_more"`
		}
		r.json(t, &page)
		for _, m := range page.Messages {
			ids = append(ids, m.ID)
		}
		require.Equal(t, page.HasMore, page.NextCursor != nil)
		if !page.HasMore {
			return ids
		}
		url = path + sep + "cursor=" + *page.NextCursor
	}
	t.Fatal("listing never ended")
	return nil
}
