package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
	"github.com/dlq/dlq/textindex"
)

// apiOptions are the flags of `dlq-bench api`.
type apiOptions struct {
	pgURL        string
	schema       string
	n            int
	reuse        bool
	iterations   int
	depth        int
	ingestCost   bool
	ingestOnly   bool
	ingestN      int
	out          string
	cursor       string
	withoutIdx   string // comma-separated index names the generator leaves unbuilt
	skipPages    string // console: a regular expression of page names not to measure
	cpuProfile   string // console: a CPU profile of the measured pages
	onlyPages    string // console: a regular expression of the only page names to measure
	genOnly      bool
	textOnly     bool
	ingestRounds int
	searchOnly   bool
	// buildText writes the text search documents of the schema's rows
	// in bulk (buildtext.go) before measuring.
	buildText        bool
	buildTextWorkers int
	// textDuty is the text indexer's duty in the ingest cost with
	// -ingest-text-only; textNoIndexer adds text search on without it.
	textDuty      int
	textNoIndexer bool
	// ingestInto writes the ingest-cost runs into this existing schema
	// (the 10M bench_api) instead of fresh ones.
	ingestInto string
}

// API runs `dlq-bench api`: it fills a schema with generated messages
// (10 million by default) and measures the latency of the API's pages,
// searches, stats and status over real HTTP, and what the search index
// costs ingest.
func API(args []string) error {
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
	fs.BoolVar(&o.textOnly, "ingest-text-only", false, "ingest cost: compare only text search on (the text indexer working beside ingest at its default pacing, as in dlq serve) against text search off")
	fs.StringVar(&o.ingestInto, "ingest-into", "", "ingest cost: write every run into this existing schema (e.g. bench_api, 10,000,000 rows with their text documents) instead of a fresh one; the rows stay")
	fs.IntVar(&o.textDuty, "text-index-duty", textindex.DutyDefault, "-ingest-text-only: the text indexer's duty (percent) beside ingest (default: dlq serve's)")
	fs.BoolVar(&o.textNoIndexer, "ingest-text-no-indexer", false, "-ingest-text-only: also text search on without the indexer running (what ingest itself pays)")
	fs.BoolVar(&o.buildText, "build-text", false, "write the text search documents (message_text) of the schema's rows in bulk, then build their GIN index, printing timings (with -reuse on an existing schema; a fresh generation has none until this runs); with -generate-only, nothing else")
	fs.IntVar(&o.buildTextWorkers, "build-text-workers", runtime.NumCPU(), "-build-text: parallel INSERT ... SELECT connections")
	fs.IntVar(&o.ingestRounds, "ingest-rounds", 3, "ingest cost: rounds, the variants alternating in each")
	fs.BoolVar(&o.genOnly, "generate-only", false, "only fill the schema (or find it reusable), measure nothing")
	fs.BoolVar(&o.searchOnly, "search-only", false, "measure only the searches (q), not the listings, stats and status")
	fs.StringVar(&o.withoutIdx, "without-indexes", "", "generate without these indexes (comma-separated names, e.g. dead_messages_search): faster, for runs that do not need them")
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
		if o.buildText {
			if err := buildText(ctx, o, dsn); err != nil {
				return err
			}
		}
		if o.genOnly {
			return nil
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

const benchToken = "bench-admin-token-0123456789"

// measureAPI measures the API's pages, searches, stats and status over
// real HTTP against the schema at dsn, in a fixed order: text searches,
// then (unless o.searchOnly) listings, the other searches, stats and
// status. It returns what it measured up to an error too.
func measureAPI(ctx context.Context, o apiOptions, dsn string) ([]apiResult, error) {
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 8})
	if err != nil {
		return nil, err
	}
	defer st.Close()
	base, shutdown, err := serveBenchAPI(st)
	if err != nil {
		return nil, err
	}
	defer shutdown()
	b := &apiBench{ctx: ctx, base: base, iterations: o.iterations,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}

	// Values to search for, sampled from the table.
	sb := st.Bench()
	msgIDs, traces, err := sb.SampleSearchValues(ctx, o.iterations+10)
	if err != nil {
		return nil, err
	}
	bodyQueue, bodyPhrase, err := sb.BodyPhrase(ctx)
	if err != nil {
		return nil, err
	}
	dayAgo := url.QueryEscape(time.Now().Add(-24 * time.Hour).UTC().Format(time.RFC3339))

	if err := b.measureTextSearches(); err != nil {
		return b.results, err
	}
	if o.searchOnly {
		return b.results, nil
	}
	if err := b.measureListings(o, sb); err != nil {
		return b.results, err
	}
	if err := b.measureSearches(sb, apiSamples{msgIDs: msgIDs, traces: traces, bodyQueue: bodyQueue, bodyPhrase: bodyPhrase, dayAgo: dayAgo}); err != nil {
		return b.results, err
	}
	err = b.measureAll(
		apiMeasure{"stats", samePath("/api/v1/stats")},
		apiMeasure{"status", samePath("/api/v1/status")},
	)
	return b.results, err
}

// serveBenchAPI serves the API over st on a local port, with benchToken
// as the admin token and no rate limit. It returns the server's base URL
// and what shuts it down.
func serveBenchAPI(st *store.Store) (base string, shutdown func(), err error) {
	authn, err := auth.New(auth.Config{AdminToken: benchToken, RatePerSecond: -1})
	if err != nil {
		return "", nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	operations, err := ops.New(ops.Config{Store: st, Logger: log})
	if err != nil {
		return "", nil, err
	}
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: operations, Auth: authn, Logger: log})
	if err != nil {
		return "", nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	shutdown = func() { _ = srv.Shutdown(context.Background()) }
	return "http://" + ln.Addr().String(), shutdown, nil
}

// apiBench measures requests to one API server and collects the results.
type apiBench struct {
	ctx        context.Context
	base       string
	client     *http.Client
	iterations int
	results    []apiResult
}

// apiMeasure is one measurement: its name, and the path of the i-th
// request.
type apiMeasure struct {
	name string
	path func(i int) string
}

// samePath is the path of a measurement whose every request is the same.
func samePath(p string) func(int) string { return func(int) string { return p } }

// apiSamples are the values measureSearches looks for, sampled from the
// table, and the lower time bound of its body searches.
type apiSamples struct {
	msgIDs, traces        []string
	bodyQueue, bodyPhrase string
	dayAgo                string // RFC 3339, query-escaped
}

// get1 requests path once.
func (b *apiBench) get1(path string) (int, []byte, error) {
	req, _ := http.NewRequestWithContext(b.ctx, "GET", b.base+path, nil)
	req.Header.Set("Authorization", "Bearer "+benchToken)
	resp, err := b.client.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return resp.StatusCode, body, fmt.Errorf("GET %s: %d %s", path, resp.StatusCode, body)
	}
	return resp.StatusCode, body, err
}

// get retries a failed request: on this shared machine other test suites
// restart PostgreSQL now and then. A retried request is not timed
// (measure times get's successful attempt only).
func (b *apiBench) get(path string) (int, []byte, error) {
	var (
		code int
		body []byte
		err  error
	)
	for attempt := range 5 {
		if code, body, err = b.get1(path); err == nil || (code != 0 && code < 500) {
			return code, body, err
		}
		fmt.Printf("  (attempt %d failed: %.200v; retrying)\n", attempt+1, err)
		time.Sleep(3 * time.Second)
	}
	return code, body, err
}

// measure times b.iterations requests of path after 10 warm-up requests,
// prints the percentiles and adds them to b.results.
func (b *apiBench) measure(name string, path func(i int) string) error {
	for i := range 10 {
		if _, _, err := b.get(path(i)); err != nil {
			return err
		}
	}
	lat := make([]time.Duration, 0, b.iterations)
	rowsSeen := 0
	for i := range b.iterations {
		t := time.Now()
		_, body, err := b.get1(path(i + 10))
		if err != nil {
			// Not timed: retry until the server answers again.
			if _, _, err = b.get(path(i + 10)); err != nil {
				return err
			}
			t = time.Now()
			if _, body, err = b.get1(path(i + 10)); err != nil {
				return err
			}
		}
		lat = append(lat, time.Since(t))
		rowsSeen = strings.Count(string(body), `"source_exchange"`)
	}
	slices.Sort(lat)
	r := apiResult{Bench: "api", Name: name, N: b.iterations, P50ms: ms(pct(lat, 0.50)), P99ms: ms(pct(lat, 0.99)), MaxMs: ms(lat[len(lat)-1]), Rows: rowsSeen}
	load := strconv.FormatFloat(loadAvg(), 'f', 2, 64)
	r.Note = "load " + load
	fmt.Printf("%-52s p50 %8.2f ms  p99 %8.2f ms  max %8.2f ms  (%d rows in the last answer; load %s)\n", name, r.P50ms, r.P99ms, r.MaxMs, rowsSeen, load)
	b.results = append(b.results, r)
	return nil
}

// measureAll measures each of list in turn, up to the first error.
func (b *apiBench) measureAll(list ...apiMeasure) error {
	for _, m := range list {
		if err := b.measure(m.name, m.path); err != nil {
			return err
		}
	}
	return nil
}

// measureTextSearches measures text search across every queue
// (migration 00078).
func (b *apiBench) measureTextSearches() error {
	return b.measureAll(
		apiMeasure{"text: rare phrase over every queue (" + "quarantined by customs" + ")", samePath("/api/v1/messages?status=all&q=" + url.QueryEscape("quarantined by customs"))},
		apiMeasure{"text: prefix over every queue (quarant*)", samePath("/api/v1/messages?status=all&q=" + url.QueryEscape("quarant*"))},
		apiMeasure{"text: stack frame word (LedgerCompactor)", samePath("/api/v1/messages?status=all&q=LedgerCompactor")},
		apiMeasure{"text: header value words (a customer's name, 1 message in 40,000)", func(i int) string {
			return "/api/v1/messages?status=all&q=" + url.QueryEscape(benchFirstNames[i%len(benchFirstNames)]+" "+benchLastNames[i*7%len(benchLastNames)])
		}},
	)
}

// measureListings measures the first pages, the page at o.depth (paging
// there first unless o.cursor is its cursor) and the filtered pages.
func (b *apiBench) measureListings(o apiOptions, sb store.Bench) error {
	if err := b.measureAll(
		apiMeasure{"first page (pending, 50)", samePath("/api/v1/messages")},
		apiMeasure{"first page (pending, 1000)", samePath("/api/v1/messages?limit=1000")},
	); err != nil {
		return err
	}
	depth, cursor, err := b.walkToDepth(o)
	if err != nil {
		return err
	}
	if err := b.measureAll(
		apiMeasure{fmt.Sprintf("page at depth %d (pending, 50)", depth), samePath("/api/v1/messages?cursor=" + cursor)},
		apiMeasure{"filtered page (source_queue+reason)", samePath("/api/v1/messages?source_queue=shipping&reason=delivery_limit")},
		apiMeasure{"filtered page (status=acknowledged)", samePath("/api/v1/messages?status=acknowledged")},
	); err != nil {
		return err
	}
	gid, err := sb.GroupByPending(b.ctx, 20)
	if err != nil {
		return err
	}
	return b.measure("filtered page (group)", samePath("/api/v1/messages?group="+store.FormatGroupID(gid)))
}

// walkToDepth pages through pending messages, 1000 at a time, to
// o.depth, and returns the depth reached and its cursor. It reports the
// walk's mean time per page in b.results. With o.cursor it walks nothing:
// that is the cursor of o.depth.
func (b *apiBench) walkToDepth(o apiOptions) (int, string, error) {
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
		_, body, err := b.get(p)
		if err != nil {
			return depth, cursor, err
		}
		var page struct {
			Messages   []json.RawMessage `json:"messages"`
			NextCursor *string           `json:"next_cursor"`
		}
		if err := json.Unmarshal(body, &page); err != nil {
			return depth, cursor, err
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
		b.results = append(b.results, apiResult{Bench: "api", Name: "walk pending 1000 per page", Rows: depth, P50ms: ms(walk) / float64(max(1, depth/1000)), Note: "mean ms per page while paging to the deep page"})
	}
	return depth, cursor, nil
}

// measureSearches measures the searches (q) besides text search: failure
// text, message ids, header values, bodies and values in failure text.
func (b *apiBench) measureSearches(sb store.Bench, v apiSamples) error {
	if err := b.measureAll(
		apiMeasure{"search failure text (rare: deadlock)", samePath("/api/v1/messages?q=" + url.QueryEscape("deadlock detected while"))},
		apiMeasure{"search failure text (common: declined by issuer)", samePath("/api/v1/messages?q=" + url.QueryEscape("declined by issuer"))},
		apiMeasure{"search message id", func(i int) string { return "/api/v1/messages?status=all&q=" + v.msgIDs[i%len(v.msgIDs)] }},
		apiMeasure{"search header value (trace id)", func(i int) string { return "/api/v1/messages?status=all&q=" + v.traces[i%len(v.traces)] }},
		apiMeasure{"search header value shared by 20k messages (tenant)", func(i int) string {
			return "/api/v1/messages?status=all&q=tenant-" + strconv.Itoa(i%500)
		}},
		apiMeasure{"search failure text with a value (took <n>ms)", func(i int) string {
			return "/api/v1/messages?q=" + url.QueryEscape("took "+strconv.Itoa(1000+i*97%30000)+"ms")
		}},
		apiMeasure{"search body phrase (one queue, last 24h)", samePath("/api/v1/messages?status=all&source_queue=" + url.QueryEscape(v.bodyQueue) +
			"&failed_after=" + v.dayAgo + "&q=" + url.QueryEscape(v.bodyPhrase))},
	); err != nil {
		return err
	}
	// The largest queue reads the most rows for the same time range.
	bigQueue, err := sb.LargestQueue(b.ctx)
	if err != nil {
		return err
	}
	return b.measureAll(
		apiMeasure{"search body phrase (largest queue, last 24h)", samePath("/api/v1/messages?status=all&source_queue=" + url.QueryEscape(bigQueue) +
			"&failed_after=" + v.dayAgo + "&q=" + url.QueryEscape(v.bodyPhrase))},
		apiMeasure{"search value in failure text (SKU in a quoted value)", func(i int) string {
			return "/api/v1/messages?status=all&q=SKU-" + strconv.Itoa(i*37%100000)
		}},
	)
}
