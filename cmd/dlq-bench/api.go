package main

import (
	"cmp"
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jackc/pgx/v5"
	"golang.org/x/sync/errgroup"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// apiOptions are the flags of `dlq-bench api`.
type apiOptions struct {
	pgURL      string
	schema     string
	n          int
	reuse      bool
	iterations int
	depth      int
	ingestCost bool
	ingestOnly bool
	ingestN    int
	out        string
	cursor     string
	skip       string
}

func benchAPI(args []string) error {
	o := apiOptions{}
	fs := flag.NewFlagSet("dlq-bench api", flag.ContinueOnError)
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"), "PostgreSQL database")
	fs.StringVar(&o.schema, "schema", "bench_api", "schema holding the generated messages")
	fs.IntVar(&o.n, "n", 10_000_000, "messages to generate")
	fs.BoolVar(&o.reuse, "reuse", false, "reuse the schema if it already holds -n messages (skip generation)")
	fs.IntVar(&o.iterations, "iterations", 200, "timed requests per measurement (after 10 warm-up requests)")
	fs.IntVar(&o.depth, "depth", 5_000_000, "depth of the deep page, reached by paging through pending messages 1000 at a time")
	fs.BoolVar(&o.ingestCost, "ingest-cost", true, "also measure IngestBatch throughput with and without the search index")
	fs.BoolVar(&o.ingestOnly, "ingest-only", false, "measure only the ingest cost of the search index")
	fs.IntVar(&o.ingestN, "ingest-n", 200_000, "messages per ingest-cost run")
	fs.StringVar(&o.out, "out", "", "append results as JSON lines to this file")
	fs.StringVar(&o.cursor, "cursor", "", "cursor of the deep page from an earlier run on the same data (skips paging there)")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	ctx := context.Background()
	fmt.Printf("machine: %d CPUs (GOMAXPROCS %d), %s\n", runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version())

	dsn, err := withSearchPath(o.pgURL, o.schema+",public")
	if err != nil {
		return err
	}
	var results []apiResult
	if !o.ingestOnly {
		if err := prepareAPISchema(ctx, o, dsn); err != nil {
			return err
		}
		res, err := measureAPI(ctx, o, dsn)
		results = append(results, res...)
		if err != nil {
			return err
		}
	}
	if o.ingestCost || o.ingestOnly {
		res, err := measureIngestCost(ctx, o)
		results = append(results, res...)
		if err != nil {
			return err
		}
	}
	if o.out != "" {
		f, err := os.OpenFile(o.out, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
		if err != nil {
			return err
		}
		defer f.Close()
		for _, r := range results {
			b, _ := json.Marshal(r)
			fmt.Fprintf(f, "%s\n", b)
		}
	}
	return nil
}

type apiResult struct {
	Bench   string  `json:"bench"`
	Name    string  `json:"name"`
	N       int     `json:"n"`
	P50ms   float64 `json:"p50_ms,omitempty"`
	P99ms   float64 `json:"p99_ms,omitempty"`
	MaxMs   float64 `json:"max_ms,omitempty"`
	Rows    int     `json:"rows,omitempty"`
	MsgsSec float64 `json:"msgs_per_s,omitempty"`
	Note    string  `json:"note,omitempty"`
}

// ---- generation ------------------------------------------------------------

var benchQueues = []string{"orders", "billing", "shipping", "inventory", "payments", "notifications", "search-index",
	"emails", "invoices", "refunds", "accounts", "audit-events", "webhooks", "reports", "pricing", "catalog",
	"recommendations", "fraud-checks", "loyalty", "exports"}

// failureTemplate is one way messages fail; its variable parts differ per
// message, so each (queue, reason, template) is one failure group.
type failureTemplate struct {
	typ    string
	weight int
	msg    func(r *rand.Rand) string
}

var benchFailures = []failureTemplate{
	{"TimeoutError", 30, func(r *rand.Rand) string { return fmt.Sprintf("upstream inventory-svc took %dms", 1000+r.IntN(30000)) }},
	{"ConnectionError", 15, func(r *rand.Rand) string {
		return fmt.Sprintf("connection refused to 10.0.%d.%d:5432", r.IntN(255), r.IntN(255))
	}},
	{"ValidationError", 20, func(r *rand.Rand) string {
		return fmt.Sprintf("field 'sku' has invalid value 'SKU-%d'", r.IntN(100000))
	}},
	{"PaymentDeclined", 10, func(r *rand.Rand) string { return fmt.Sprintf("card ending %04d declined by issuer", r.IntN(10000)) }},
	{"KeyError", 10, func(r *rand.Rand) string { return fmt.Sprintf("missing key order-%d in cache", r.IntN(1000000)) }},
	{"java.lang.NullPointerException", 14, func(*rand.Rand) string {
		return `Cannot invoke "Order.getId()" because "order" is null`
	}},
	{"DeadlockDetected", 1, func(r *rand.Rand) string {
		return fmt.Sprintf("deadlock detected while updating stock row %d", r.IntN(1000))
	}},
}

type groupKey struct {
	queue, reason string
	tmpl          int
}

// rowGen generates the rows of one COPY stream.
type rowGen struct {
	r        *rand.Rand
	n        int
	start    time.Time
	span     time.Duration
	groups   map[groupKey]int64
	groupsMu *sync.Mutex
	zipf     *rand.Zipf
	buf      []byte
}

func (g *rowGen) groupID(queue, reason string, tmpl int, typ, msg string) int64 {
	k := groupKey{queue, reason, tmpl}
	g.groupsMu.Lock()
	defer g.groupsMu.Unlock()
	if id, ok := g.groups[k]; ok {
		return id
	}
	id, _ := store.ParseGroupID(store.GroupIDOf(queue, reason, typ, msg))
	g.groups[k] = id
	return id
}

func pickWeighted(r *rand.Rand) int {
	total := 0
	for _, f := range benchFailures {
		total += f.weight
	}
	x := r.IntN(total)
	for i, f := range benchFailures {
		if x < f.weight {
			return i
		}
		x -= f.weight
	}
	return 0
}

// row returns the COPY values of message i (ids ascend with time, as
// they do in production).
func (g *rowGen) row(i int) []any {
	r := g.r
	id := int64(i + 1)
	queue := benchQueues[g.zipf.Uint64()]
	failedAt := g.start.Add(time.Duration(float64(g.span) * float64(i) / float64(g.n))).Add(-time.Duration(r.IntN(60)) * time.Second)
	reason := "rejected"
	switch x := r.IntN(100); {
	case x < 15:
		reason = "expired"
	case x < 20:
		reason = "maxlen"
	case x < 30:
		reason = "delivery_limit"
	}
	var failure, ftype, fmsg any
	var group int64
	hdr := g.buf[:0]
	hdr = append(hdr, `{"tenant":"tenant-`...)
	hdr = strconv.AppendInt(hdr, int64(r.IntN(500)), 10)
	hdr = append(hdr, `","trace-id":"`...)
	trace := randHex(r, 8)
	hdr = append(hdr, trace...)
	hdr = append(hdr, '"')
	if reason == "rejected" || reason == "delivery_limit" {
		t := pickWeighted(r)
		f := benchFailures[t]
		m := f.msg(r)
		fb, _ := json.Marshal(map[string]string{"type": f.typ, "message": m, "origin": "generic"})
		failure, ftype, fmsg = fb, f.typ, m
		group = g.groupID(queue, reason, t, f.typ, m)
		hdr = append(hdr, `,"x-exception-type":`...)
		hdr = appendJSONString(hdr, f.typ)
		hdr = append(hdr, `,"x-error-message":`...)
		hdr = appendJSONString(hdr, m)
	} else {
		group = g.groupID(queue, reason, -1, "", "")
	}
	hdr = append(hdr, `,"x-death":[{"count":{"type":"int64","value":1},"exchange":"app","queue":"`...)
	hdr = append(hdr, queue...)
	hdr = append(hdr, `","reason":"`...)
	hdr = append(hdr, reason...)
	hdr = append(hdr, `","routing-keys":["`...)
	hdr = append(hdr, queue...)
	hdr = append(hdr, `.created"],"time":{"type":"timestamp","value":"`...)
	hdr = failedAt.UTC().Truncate(time.Second).AppendFormat(hdr, time.RFC3339)
	hdr = append(hdr, `"}}],"x-first-death-exchange":"app","x-first-death-queue":"`...)
	hdr = append(hdr, queue...)
	hdr = append(hdr, `","x-first-death-reason":"`...)
	hdr = append(hdr, reason...)
	hdr = append(hdr, `"}`...)
	headers := slices.Clone(hdr)
	g.buf = hdr

	msgID := randHex(r, 16)
	props := []byte(`{"content_type":"application/json","delivery_mode":2,"message_id":"` + msgID + `"}`)
	body := []byte(fmt.Sprintf(`{"order":%d,"sku":"SKU-%d","qty":%d}`, id, r.IntN(100000), 1+r.IntN(9)))

	age := g.start.Add(g.span).Sub(failedAt)
	status := "pending"
	var replayedAt, ackAt any
	replayCount := 0
	x := r.IntN(100)
	switch {
	case age > 7*24*time.Hour && x < 35, age <= 7*24*time.Hour && x < 8:
		status = "acknowledged"
		ackAt = failedAt.Add(time.Hour)
	case age > 7*24*time.Hour && x < 55, age <= 7*24*time.Hour && x < 12:
		status = "replayed"
		replayedAt = failedAt.Add(30 * time.Minute)
		replayCount = 1
	case x == 99:
		replayCount = 1 + r.IntN(3) // a repeat failure
	}
	nm := store.NewMessage{MessageID: msgID, Headers: headers}
	if ftype != nil {
		nm.FailureType, nm.FailureMessage = ftype.(string), fmsg.(string)
	}
	keys := store.SearchKeys(&nm)
	return []any{id, msgID, queue, "app", queue + ".created", "dlq", reason, int64(1), failure, ftype, fmsg,
		props, headers, body, len(body), status, replayCount, failedAt, failedAt, replayedAt, ackAt, failedAt,
		int64(r.Uint64() >> 1), group, keys, store.KeyHashes(keys)}
}

var genColumns = []string{"id", "message_id", "source_queue", "source_exchange", "source_routing_key", "dead_letter_queue",
	"reason", "death_count", "failure", "failure_type", "failure_message", "properties", "headers", "body", "body_size",
	"status", "replay_count", "first_failed_at", "failed_at", "replayed_at", "acknowledged_at", "status_changed_at",
	"fingerprint", "group_id", "search_keys", "search_hashes"}

func randHex(r *rand.Rand, n int) string {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return hex.EncodeToString(b)
}

func appendJSONString(dst []byte, s string) []byte {
	b, _ := json.Marshal(s)
	return append(dst, b...)
}

// prepareAPISchema creates and fills the benchmark schema: migrate, drop
// the secondary indexes, COPY in parallel streams, rebuild the indexes,
// derive the counter tables, VACUUM ANALYZE.
func prepareAPISchema(ctx context.Context, o apiOptions, dsn string) error {
	admin, err := pgx.Connect(ctx, o.pgURL)
	if err != nil {
		return fmt.Errorf("connect to %s (does database bench exist? `make bench-limits` creates it): %w", o.pgURL, err)
	}
	defer admin.Close(ctx)
	if o.reuse {
		var n int64
		err := admin.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{o.schema, "dead_messages"}.Sanitize()).Scan(&n)
		if err == nil && n == int64(o.n) {
			fmt.Printf("reusing schema %s with %d messages\n", o.schema, n)
			return nil
		}
		fmt.Printf("schema %s not reusable (%v, %d rows); generating\n", o.schema, err, n)
	}
	if _, err := admin.Exec(ctx, "DROP SCHEMA IF EXISTS "+pgx.Identifier{o.schema}.Sanitize()+" CASCADE"); err != nil {
		return err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{o.schema}.Sanitize()); err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return err
	}
	pool := st.Pool()

	rows, err := pool.Query(ctx, `SELECT indexname, indexdef FROM pg_indexes
WHERE schemaname = $1 AND tablename = 'dead_messages' AND indexname <> 'dead_messages_pkey'`, o.schema)
	if err != nil {
		return err
	}
	type index struct{ name, def string }
	indexes, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (index, error) {
		var i index
		return i, r.Scan(&i.name, &i.def)
	})
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if _, err := pool.Exec(ctx, "DROP INDEX "+pgx.Identifier{o.schema, ix.name}.Sanitize()); err != nil {
			return err
		}
	}

	start := time.Now()
	now := time.Now().UTC()
	span := 30 * 24 * time.Hour
	streams := max(2, runtime.NumCPU())
	groups := map[groupKey]int64{}
	var mu sync.Mutex
	eg, gctx := errgroup.WithContext(ctx)
	per := (o.n + streams - 1) / streams
	for s := range streams {
		lo, hi := s*per, min(o.n, (s+1)*per)
		eg.Go(func() error {
			r := rand.New(rand.NewPCG(uint64(s), 42))
			g := &rowGen{r: r, n: o.n, start: now.Add(-span), span: span, groups: groups, groupsMu: &mu,
				zipf: rand.NewZipf(r, 1.1, 1, uint64(len(benchQueues)-1))}
			// Chunks of one transaction each keep WAL and memory in check.
			for c := lo; c < hi; c += 500_000 {
				end := min(hi, c+500_000)
				i := c
				_, err := pool.CopyFrom(gctx, pgx.Identifier{"dead_messages"}, genColumns, pgx.CopyFromFunc(func() ([]any, error) {
					if i >= end {
						return nil, nil
					}
					row := g.row(i)
					i++
					return row, nil
				}))
				if err != nil {
					return fmt.Errorf("copy rows %d-%d: %w", c, end, err)
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return err
	}
	fmt.Printf("generated %d messages in %s\n", o.n, time.Since(start).Round(time.Second))

	conn, err := pool.Acquire(ctx)
	if err != nil {
		return err
	}
	defer conn.Release()
	for _, q := range []string{`SET maintenance_work_mem = '1GB'`, `SET max_parallel_maintenance_workers = 2`} {
		if _, err := conn.Exec(ctx, q); err != nil {
			return err
		}
	}
	for _, ix := range indexes {
		t := time.Now()
		if _, err := conn.Exec(ctx, ix.def); err != nil {
			return fmt.Errorf("rebuild %s: %w", ix.name, err)
		}
		fmt.Printf("index %s built in %s\n", ix.name, time.Since(t).Round(time.Second))
	}
	derive := []string{
		`SELECT setval(pg_get_serial_sequence('dead_messages', 'id'), (SELECT max(id) FROM dead_messages))`,
		`INSERT INTO queue_summary (source_queue, status, messages, bytes)
		 SELECT source_queue, status, count(*), sum(body_size) FROM dead_messages GROUP BY 1, 2`,
		`INSERT INTO failure_groups (id, source_queue, reason, failure_type, pattern, sample_message,
		     pending, replaying, replayed, acknowledged, first_seen, last_seen)
		 SELECT group_id, min(source_queue), min(reason), coalesce(min(failure_type), ''), '', coalesce(min(failure_message), ''),
		     count(*) FILTER (WHERE status = 'pending'), count(*) FILTER (WHERE status = 'replaying'),
		     count(*) FILTER (WHERE status = 'replayed'), count(*) FILTER (WHERE status = 'acknowledged'),
		     min(failed_at), max(failed_at)
		 FROM dead_messages GROUP BY group_id`,
		`INSERT INTO queue_activity (source_queue, hour, new, acknowledged, replayed)
		 SELECT source_queue, date_trunc('hour', failed_at), count(*),
		     count(*) FILTER (WHERE status = 'acknowledged'), count(*) FILTER (WHERE status = 'replayed')
		 FROM dead_messages WHERE failed_at > now() - interval '25 hours' GROUP BY 1, 2`,
		`VACUUM ANALYZE dead_messages`,
		`VACUUM ANALYZE failure_groups`,
		`VACUUM ANALYZE queue_summary`,
		`VACUUM ANALYZE queue_activity`,
	}
	for _, q := range derive {
		t := time.Now()
		if _, err := conn.Exec(ctx, q); err != nil {
			return fmt.Errorf("%s: %w", strings.Fields(q)[0], err)
		}
		fmt.Printf("%s done in %s\n", strings.Join(strings.Fields(q)[:2], " "), time.Since(t).Round(time.Second))
	}
	// The patterns come from the same normalisation ingest uses.
	rows, err = pool.Query(ctx, `SELECT id, source_queue, reason, failure_type, sample_message FROM failure_groups`)
	if err != nil {
		return err
	}
	type grp struct {
		id                     int64
		queue, reason, typ, ms string
	}
	gs, err := pgx.CollectRows(rows, func(r pgx.CollectableRow) (grp, error) {
		var g grp
		return g, r.Scan(&g.id, &g.queue, &g.reason, &g.typ, &g.ms)
	})
	if err != nil {
		return err
	}
	for _, g := range gs {
		if _, err := pool.Exec(ctx, `UPDATE failure_groups SET pattern = $2 WHERE id = $1`, g.id, store.NormalizeFailure(g.ms)); err != nil {
			return err
		}
	}
	var size string
	_ = pool.QueryRow(ctx, `SELECT pg_size_pretty(pg_total_relation_size('dead_messages'))`).Scan(&size)
	fmt.Printf("schema %s ready in %s: %d messages, %d groups, dead_messages %s with indexes\n",
		o.schema, time.Since(start).Round(time.Second), o.n, len(gs), size)
	return nil
}

// ---- measurement -----------------------------------------------------------

const benchToken = "bench-admin-token-0123456789"

func measureAPI(ctx context.Context, o apiOptions, dsn string) ([]apiResult, error) {
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 8})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	authn, err := auth.New(auth.Config{AdminToken: benchToken, RatePerSecond: -1})
	if err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	operations, err := ops.New(ops.Config{Store: st, Logger: log})
	if err != nil {
		return nil, err
	}
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: operations, Auth: authn, Logger: log})
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	defer srv.Shutdown(context.Background()) //nolint:errcheck
	base := "http://" + ln.Addr().String()
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}

	get1 := func(path string) (int, []byte, error) {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path, nil)
		req.Header.Set("Authorization", "Bearer "+benchToken)
		resp, err := client.Do(req)
		if err != nil {
			return 0, nil, err
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if resp.StatusCode != http.StatusOK {
			return resp.StatusCode, b, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, b)
		}
		return resp.StatusCode, b, err
	}
	// get retries a failed request: on this shared machine other test
	// suites restart PostgreSQL now and then. A retried request is not
	// timed (measure times get's successful attempt only).
	get := func(path string) (int, []byte, error) {
		var (
			code int
			b    []byte
			err  error
		)
		for attempt := range 5 {
			if code, b, err = get1(path); err == nil || (code != 0 && code < 500) {
				return code, b, err
			}
			fmt.Printf("  (attempt %d failed: %.200v; retrying)\n", attempt+1, err)
			time.Sleep(3 * time.Second)
		}
		return code, b, err
	}

	// Values to search for, sampled from the table.
	pool := st.Pool()
	var msgIDs, traces []string
	rows, err := pool.Query(ctx, `SELECT message_id, headers->>'trace-id' FROM dead_messages TABLESAMPLE SYSTEM (0.1) LIMIT $1`, o.iterations+10)
	if err != nil {
		return nil, err
	}
	for rows.Next() {
		var m, t string
		if err := rows.Scan(&m, &t); err != nil {
			return nil, err
		}
		msgIDs, traces = append(msgIDs, m), append(traces, t)
	}
	rows.Close()
	var bodyQueue, bodyPhrase string
	err = pool.QueryRow(ctx, `SELECT source_queue, substring(convert_from(body, 'UTF8') from '"sku":"SKU-[0-9]+"')
		FROM dead_messages WHERE id = (SELECT max(id) - 1000 FROM dead_messages)`).Scan(&bodyQueue, &bodyPhrase)
	if err != nil {
		return nil, fmt.Errorf("pick a body phrase: %w", err)
	}
	dayAgo := url.QueryEscape(time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339))

	var results []apiResult
	measure := func(name string, path func(i int) string) error {
		for i := range 10 {
			if _, _, err := get(path(i)); err != nil {
				return err
			}
		}
		lat := make([]time.Duration, 0, o.iterations)
		rowsSeen := 0
		for i := range o.iterations {
			t := time.Now()
			_, b, err := get1(path(i + 10))
			if err != nil {
				// Not timed: retry until the server answers again.
				if _, b, err = get(path(i + 10)); err != nil {
					return err
				}
				t = time.Now()
				if _, b, err = get1(path(i + 10)); err != nil {
					return err
				}
			}
			lat = append(lat, time.Since(t))
			rowsSeen = strings.Count(string(b), `"source_exchange"`)
		}
		slices.Sort(lat)
		r := apiResult{Bench: "api", Name: name, N: o.iterations, P50ms: ms(pct(lat, 0.50)), P99ms: ms(pct(lat, 0.99)), MaxMs: ms(lat[len(lat)-1]), Rows: rowsSeen}
		r.Note = "load " + loadavg()
		fmt.Printf("%-52s p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms  (%d rows in the last answer; load %s)\n", name, r.P50ms, r.P99ms, r.MaxMs, rowsSeen, loadavg())
		results = append(results, r)
		return nil
	}
	static := func(p string) func(int) string { return func(int) string { return p } }

	if err := measure("first page (pending, 50)", static("/api/v1/messages")); err != nil {
		return results, err
	}
	if err := measure("first page (pending, 1000)", static("/api/v1/messages?limit=1000")); err != nil {
		return results, err
	}

	// The deep page: page through pending messages to the depth.
	t := time.Now()
	cursor := o.cursor
	depth := 0
	if cursor != "" {
		depth = o.depth
	}
	for depth < o.depth {
		p := "/api/v1/messages?limit=1000"
		if cursor != "" {
			p += "&cursor=" + cursor
		}
		_, b, err := get(p)
		if err != nil {
			return results, err
		}
		var page struct {
			Messages   []json.RawMessage `json:"messages"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return results, err
		}
		depth += len(page.Messages)
		if page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if o.cursor == "" {
		walk := time.Since(t)
		fmt.Printf("paged to depth %d (1000 per page) in %s: %.1f ms per page of 1000; deep cursor %s\n", depth, walk.Round(time.Second), ms(walk)/float64(max(1, depth/1000)), cursor)
		results = append(results, apiResult{Bench: "api", Name: "walk pending 1000 per page", Rows: depth, P50ms: ms(walk) / float64(max(1, depth/1000)), Note: "mean ms per page while paging to the deep page"})
	}
	if err := measure(fmt.Sprintf("page at depth %d (pending, 50)", depth), static("/api/v1/messages?cursor="+cursor)); err != nil {
		return results, err
	}
	if err := measure("filtered page (source_queue+reason)", static("/api/v1/messages?source_queue=shipping&reason=delivery_limit")); err != nil {
		return results, err
	}
	if err := measure("filtered page (status=acknowledged)", static("/api/v1/messages?status=acknowledged")); err != nil {
		return results, err
	}
	var gid int64
	if err := pool.QueryRow(ctx, `SELECT id FROM failure_groups ORDER BY pending DESC LIMIT 1 OFFSET 20`).Scan(&gid); err != nil {
		return results, fmt.Errorf("pick a failure group: %w", err)
	}
	if err := measure("filtered page (group)", static("/api/v1/messages?group="+store.FormatGroupID(gid))); err != nil {
		return results, err
	}
	if err := measure("search failure text (rare: deadlock)", static("/api/v1/messages?q="+url.QueryEscape("deadlock detected while"))); err != nil {
		return results, err
	}
	if err := measure("search failure text (common: declined by issuer)", static("/api/v1/messages?q="+url.QueryEscape("declined by issuer"))); err != nil {
		return results, err
	}
	if err := measure("search message id", func(i int) string { return "/api/v1/messages?status=all&q=" + msgIDs[i%len(msgIDs)] }); err != nil {
		return results, err
	}
	if err := measure("search header value (trace id)", func(i int) string { return "/api/v1/messages?status=all&q=" + traces[i%len(traces)] }); err != nil {
		return results, err
	}
	if err := measure("search header value shared by 20k messages (tenant)", func(i int) string {
		return "/api/v1/messages?status=all&q=tenant-" + strconv.Itoa(i%500)
	}); err != nil {
		return results, err
	}
	if err := measure("search failure text with a value (took <n>ms)", func(i int) string {
		return "/api/v1/messages?q=" + url.QueryEscape("took "+strconv.Itoa(1000+i*97%30000)+"ms")
	}); err != nil {
		return results, err
	}
	if err := measure("search body phrase (one queue, last 24h)", static("/api/v1/messages?status=all&source_queue="+url.QueryEscape(bodyQueue)+
		"&failed_after="+dayAgo+"&q="+url.QueryEscape(bodyPhrase))); err != nil {
		return results, err
	}
	// The largest queue reads the most rows for the same time range.
	var bigQueue string
	if err := pool.QueryRow(ctx, `SELECT source_queue FROM queue_summary GROUP BY 1 ORDER BY sum(messages) DESC LIMIT 1`).Scan(&bigQueue); err != nil {
		return results, fmt.Errorf("pick the largest queue: %w", err)
	}
	if err := measure("search body phrase (largest queue, last 24h)", static("/api/v1/messages?status=all&source_queue="+url.QueryEscape(bigQueue)+
		"&failed_after="+dayAgo+"&q="+url.QueryEscape(bodyPhrase))); err != nil {
		return results, err
	}
	if err := measure("search value in failure text (SKU in a quoted value)", func(i int) string {
		return "/api/v1/messages?status=all&q=SKU-" + strconv.Itoa(i*37%100000)
	}); err != nil {
		return results, err
	}
	if err := measure("stats", static("/api/v1/stats")); err != nil {
		return results, err
	}
	if err := measure("status", static("/api/v1/status")); err != nil {
		return results, err
	}
	return results, nil
}

// loadavg is the 1-minute load average (other work on this machine).
func loadavg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "?"
	}
	return strings.Fields(string(b))[0]
}

func pct(d []time.Duration, p float64) time.Duration {
	i := int(math.Ceil(p*float64(len(d)))) - 1
	return d[max(0, min(i, len(d)-1))]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// pendingFailedAt is the index status and alerts read without body search.
const pendingFailedAt = `CREATE INDEX dead_messages_pending_failed_at ON dead_messages (source_queue, failed_at) WHERE status = 'pending'`

// measureIngestCost writes the same messages with IngestBatch (two writers,
// batches of 500, dlq's defaults) into fresh schemas with and without the
// search index, and with none of the API's indexes, to show what each
// costs on the database side of ingest.
func measureIngestCost(ctx context.Context, o apiOptions) ([]apiResult, error) {
	variants := []struct {
		name  string
		drop  []string
		alter string
	}{
		{"all indexes", nil, ""},
		{"without dead_messages_search", []string{"dead_messages_search"}, ""},
		// The indexes that exist for q: hashed keys (GIN), body search
		// by time (BRIN), and by queue and time — the last shared with
		// status and alerts, which without body search would need only
		// its pending part (the index migration 00050 replaced).
		{"without the search indexes (search, brin; queue_status_failed_at -> pending only)",
			[]string{"dead_messages_search", "dead_messages_failed_at_brin", "dead_messages_queue_status_failed_at"},
			pendingFailedAt},
		{"without any API index (search, brin, queue_status_failed_at -> pending only, group, repeat)",
			[]string{"dead_messages_search", "dead_messages_failed_at_brin", "dead_messages_queue_status_failed_at",
				"dead_messages_group_status_id", "dead_messages_repeat"},
			pendingFailedAt},
	}
	var results []apiResult
	// Alternate variants over three rounds so drift affects all alike.
	rates, cpus := map[string][]float64{}, map[string][]float64{}
	for round := range 3 {
		for _, v := range variants {
			rate, cpu, err := ingestOnce(ctx, o, v.drop, v.alter, round)
			if err != nil {
				return results, err
			}
			rates[v.name] = append(rates[v.name], rate)
			cpus[v.name] = append(cpus[v.name], cpu)
		}
	}
	median := func(f []float64) float64 {
		g := slices.Clone(f)
		slices.Sort(g)
		return g[len(g)/2]
	}
	var base float64
	for i, v := range variants {
		rate, cpu := median(rates[v.name]), median(cpus[v.name])
		if i == 0 {
			base = cpu
		}
		fmt.Printf("ingest %-52s PostgreSQL CPU %6.1f µs/msg (%+5.1f vs all indexes)  %7.0f msgs/s  (runs %v)\n",
			v.name, cpu, cpu-base, rate, roundAll(rates[v.name]))
		results = append(results, apiResult{Bench: "api-ingest-cost", Name: v.name, N: o.ingestN, MsgsSec: rate,
			Note: fmt.Sprintf("postgres_cpu_us_per_msg=%.1f", cpu)})
	}
	return results, nil
}

func roundAll(f []float64) []int {
	out := make([]int, len(f))
	for i, v := range f {
		out[i] = int(v)
	}
	return out
}

// ingestOnce returns the messages per second and the CPU time PostgreSQL
// spent per message (the writers' backends, including the search index's
// deferred work: autovacuum is off for the table and the pending list is
// flushed at the end). CPU per message hardly depends on what else the
// machine runs; throughput does.
func ingestOnce(ctx context.Context, o apiOptions, drop []string, alter string, round int) (float64, float64, error) {
	schema := fmt.Sprintf("bench_api_ingest_%d_%s", round, randomHex(3))
	admin, err := pgx.Connect(ctx, o.pgURL)
	if err != nil {
		return 0, 0, err
	}
	defer admin.Close(ctx)
	if _, err := admin.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize()); err != nil {
		return 0, 0, err
	}
	defer admin.Exec(context.WithoutCancel(ctx), "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE") //nolint:errcheck
	dsn, err := withSearchPath(o.pgURL, schema+",public")
	if err != nil {
		return 0, 0, err
	}
	dsn += "&application_name=" + schema
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 2})
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return 0, 0, err
	}
	for _, ix := range drop {
		if _, err := st.Pool().Exec(ctx, "DROP INDEX "+pgx.Identifier{schema, ix}.Sanitize()); err != nil {
			return 0, 0, err
		}
	}
	if alter != "" {
		if _, err := st.Pool().Exec(ctx, alter); err != nil {
			return 0, 0, err
		}
	}
	if _, err := st.Pool().Exec(ctx, `ALTER TABLE dead_messages SET (autovacuum_enabled = false)`); err != nil {
		return 0, 0, err
	}
	// Messages as the consumer stores them: typed headers with x-death and
	// failure details, small bodies.
	r := rand.New(rand.NewPCG(7, uint64(round)))
	g := &rowGen{r: r, n: o.ingestN, start: time.Now().Add(-time.Hour), span: time.Hour, groups: map[groupKey]int64{},
		groupsMu: &sync.Mutex{}, zipf: rand.NewZipf(r, 1.1, 1, uint64(len(benchQueues)-1))}
	msgs := make([]store.NewMessage, o.ingestN)
	for i := range msgs {
		row := g.row(i)
		m := store.NewMessage{
			MessageID: row[1].(string), SourceQueue: row[2].(string), SourceExchange: "app", SourceRoutingKey: row[4].(string),
			DeadLetterQueue: "dlq", Reason: row[6].(string), DeathCount: 1,
			Properties: row[11].([]byte), Headers: row[12].([]byte), Body: row[13].([]byte),
			FirstFailedAt: row[17].(time.Time), FailedAt: row[18].(time.Time), Fingerprint: int64(i + 1),
		}
		if row[8] != nil {
			m.Failure, m.FailureType, m.FailureMessage = row[8].([]byte), row[9].(string), row[10].(string)
		}
		msgs[i] = m
	}
	const batch, writers = 500, 2
	// Open both connections, then note their backends' CPU time.
	var wg sync.WaitGroup
	for range writers {
		wg.Add(1)
		go func() { defer wg.Done(); _, _ = st.Pool().Exec(ctx, `SELECT pg_sleep(0.05)`) }()
	}
	wg.Wait()
	var pids []int
	rows, err := admin.Query(ctx, `SELECT pid FROM pg_stat_activity WHERE application_name = $1`, schema)
	if err != nil {
		return 0, 0, err
	}
	pids, err = pgx.CollectRows(rows, pgx.RowTo[int])
	if err != nil {
		return 0, 0, err
	}
	cpu0 := backendsCPU(pids)
	start := time.Now()
	eg, gctx := errgroup.WithContext(ctx)
	for w := range writers {
		eg.Go(func() error {
			for lo := w * batch; lo < len(msgs); lo += writers * batch {
				hi := min(len(msgs), lo+batch)
				if _, err := st.IngestBatch(gctx, store.IngestBatch{ID: store.NewBatchID(), Consumer: "bench", Messages: msgs[lo:hi]}); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := eg.Wait(); err != nil {
		return 0, 0, err
	}
	rate := float64(len(msgs)) / time.Since(start).Seconds()
	if len(drop) == 0 || drop[0] != "dead_messages_search" {
		if _, err := st.Pool().Exec(ctx, `SELECT gin_clean_pending_list('dead_messages_search')`); err != nil {
			return 0, 0, err
		}
	}
	cpu := backendsCPU(pids) - cpu0
	return rate, cpu.Seconds() * 1e6 / float64(len(msgs)), nil
}

// backendsCPU sums the CPU time of processes (PostgreSQL runs on this
// machine; see procCPU in ingest.go).
func backendsCPU(pids []int) time.Duration {
	var sec float64
	for _, pid := range pids {
		if c, err := procCPU(pid); err == nil {
			sec += c
		}
	}
	return time.Duration(sec * float64(time.Second))
}
