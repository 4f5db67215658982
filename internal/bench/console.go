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
	"net/http/cookiejar"
	"net/url"
	"os"
	"regexp"
	"runtime"
	"runtime/pprof"
	"slices"
	"strconv"
	"time"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/console"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// Console targets (issue 14): every page's time p99 under 100 ms, the
// overview's under 50 ms, and a page with its assets under 150 KB.
const (
	consolePageP99     = 100 * time.Millisecond
	consoleOverviewP99 = 50 * time.Millisecond
	consolePageBytes   = 150 << 10
)

// Console runs `dlq-bench console`: on the API benchmark's schema (10
// million messages by default; -reuse keeps one already generated) it
// signs in to the web console and measures each page's latency over real
// HTTP and its weight with the assets it loads.
func Console(args []string) error {
	o := apiOptions{}
	fs := flag.NewFlagSet("dlq-bench console", flag.ContinueOnError)
	fs.StringVar(&o.pgURL, "pg", cmp.Or(os.Getenv("BENCH_DATABASE_URL"), "postgres://postgres@127.0.0.1:5432/bench?sslmode=disable"), "PostgreSQL database")
	fs.StringVar(&o.schema, "schema", "bench_api", "schema holding the generated messages (the API benchmark's)")
	fs.IntVar(&o.n, "n", 10_000_000, "messages to generate")
	fs.BoolVar(&o.reuse, "reuse", false, "reuse the schema if it already holds -n messages (skip generation)")
	fs.IntVar(&o.iterations, "iterations", 200, "timed requests per page (after 10 warm-up requests)")
	fs.StringVar(&o.out, "out", "", "append results as JSON lines to this file")
	fs.StringVar(&o.withoutIdx, "without-indexes", "", "generate without these indexes (comma-separated names): faster, for pages that never use them")
	fs.StringVar(&o.skipPages, "skip-pages", "", "a regular expression: pages whose name it matches are not measured (e.g. 'search' on a schema whose text documents were never built: -build-text of dlq-bench api)")
	fs.StringVar(&o.onlyPages, "pages", "", "a regular expression: only pages whose name it matches are measured (e.g. '500' for 500 messages a page)")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the measured requests (with -skip-pages, of the pages left) to this file")
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
	if err := prepareAPISchema(ctx, o, dsn); err != nil {
		return err
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return fmt.Errorf("create the CPU profile %s: %w", o.cpuProfile, err)
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return fmt.Errorf("start the CPU profile: %w", err)
		}
	}
	results, failed, err := measureConsole(ctx, o, dsn)
	if o.cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	if o.out != "" {
		if werr := appendResults(o.out, results); werr != nil {
			return werr
		}
	}
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d console targets missed", failed)
	}
	return nil
}

// consoleSession is a signed-in browser without a browser: a cookie jar.
type consoleSession struct {
	base   string
	client *http.Client
}

// get fetches path; wire leaves a gzipped answer compressed, as it
// travels to a browser.
func (s consoleSession) get(ctx context.Context, path string, wire bool) ([]byte, error) {
	return s.fetch(ctx, path, wire, false)
}

// fetch is get; refresh asks as the page's auto-refresh does (its
// content alone, every 5 s while the page is open).
func (s consoleSession) fetch(ctx context.Context, path string, wire, refresh bool) ([]byte, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.base+path, nil)
	if err != nil {
		return nil, err
	}
	if wire {
		req.Header.Set("Accept-Encoding", "gzip")
	}
	if refresh {
		req.Header.Set("X-DLQ-Refresh", "1")
	}
	resp, err := s.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err == nil && resp.StatusCode != http.StatusOK {
		err = fmt.Errorf("GET %s: %d %.300s", path, resp.StatusCode, b)
	}
	return b, err
}

var dataIDRe = regexp.MustCompile(`data-test="message-row" data-id="(\d+)"`)

// measureConsole serves the console on the schema and measures each page
// -pages and -skip-pages leave; failed counts the pages that missed a
// target.
func measureConsole(ctx context.Context, o apiOptions, dsn string) (results []apiResult, failed int, err error) {
	skip, err := regexp.Compile(o.skipPages)
	if err != nil {
		return nil, 0, fmt.Errorf("-skip-pages %q: %w", o.skipPages, err)
	}
	only, err := regexp.Compile(o.onlyPages)
	if err != nil {
		return nil, 0, fmt.Errorf("-pages %q: %w", o.onlyPages, err)
	}
	st, s, stop, err := startConsole(ctx, dsn)
	if err != nil {
		return nil, 0, err
	}
	defer stop()

	// The assets every page loads, once (the browser caches them).
	var assets int
	for _, p := range []string{"/ui/static/app.css", "/ui/static/app.js", "/ui/static/vendor/htmx.min.js"} {
		b, err := s.get(ctx, p, true)
		if err != nil {
			return nil, 0, err
		}
		assets += len(b)
	}
	fmt.Printf("assets: %d bytes gzipped (stylesheet, script, htmx)\n", assets)

	pages, err := consolePages(ctx, st, s)
	if err != nil {
		return nil, 0, err
	}
	for _, p := range pages {
		if (o.skipPages != "" && skip.MatchString(p.name)) || !only.MatchString(p.name) {
			fmt.Printf("%-40s not measured (-skip-pages, -pages)\n", p.name)
			continue
		}
		r, missed, err := measurePage(ctx, s, p, o.iterations, assets)
		if err != nil {
			return results, failed, err
		}
		results = append(results, r)
		if missed {
			failed++
		}
	}
	return results, failed, nil
}

// startConsole opens the schema's store and serves the console and API on
// a free port, signed in as the admin; stop shuts both down.
func startConsole(ctx context.Context, dsn string) (st *store.Store, s consoleSession, stop func(), err error) {
	st, err = store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 8})
	if err != nil {
		return nil, s, nil, err
	}
	var undo undoStack
	undo.push(st.Close)
	defer func() {
		if err != nil {
			undo.run()
		}
	}()
	// A schema generated before the console existed lacks its table.
	if _, err := st.Migrate(ctx, nil); err != nil {
		return nil, s, nil, err
	}
	authn, err := auth.New(auth.Config{AdminToken: benchToken, RatePerSecond: -1})
	if err != nil {
		return nil, s, nil, err
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelError}))
	// A replay service without a broker: it records and reads tasks,
	// which is all the replays page needs.
	replays, err := replay.New(replay.Config{Store: st, Logger: log})
	if err != nil {
		return nil, s, nil, err
	}
	operations, err := ops.New(ops.Config{Store: st, Replays: replays, Logger: log})
	if err != nil {
		return nil, s, nil, err
	}
	ui, err := console.New(console.Config{Ops: operations, Auth: authn, Sessions: st, RequestID: api.RequestID, Logger: log})
	if err != nil {
		return nil, s, nil, err
	}
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: operations, Auth: authn, Logger: log, Mount: map[string]http.Handler{console.Path: ui}})
	if err != nil {
		return nil, s, nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, s, nil, err
	}
	go func() { _ = srv.Serve(ln) }()
	undo.push(func() { _ = srv.Shutdown(context.Background()) })

	jar, _ := cookiejar.New(nil)
	s = consoleSession{base: "http://" + ln.Addr().String(), client: &http.Client{Jar: jar, Transport: &http.Transport{MaxIdleConnsPerHost: 4}}}
	resp, err := s.client.PostForm(s.base+"/ui/sign-in", url.Values{"token": {benchToken}})
	if err != nil {
		return nil, s, nil, err
	}
	resp.Body.Close()
	return st, s, undo.run, nil
}

// consolePage is a page to measure, with its target.
type consolePage struct {
	name  string
	limit time.Duration
	// path gives the i-th request's path (a page of messages asks for a
	// different message each time).
	path func(i int) string
	// refresh asks as the page's auto-refresh does.
	refresh bool
}

// consolePages lists the pages to measure, on the schema's largest queue,
// a group with pending messages and the messages the largest queue's page
// lists.
func consolePages(ctx context.Context, st *store.Store, s consoleSession) ([]consolePage, error) {
	sb := st.Bench()
	bigQueue, err := sb.LargestQueue(ctx)
	if err != nil {
		return nil, err
	}
	gid, err := sb.GroupByPending(ctx, 20)
	if err != nil {
		return nil, err
	}
	listing, err := s.get(ctx, "/ui/messages?source_queue="+url.QueryEscape(bigQueue), false)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, m := range dataIDRe.FindAllSubmatch(listing, -1) {
		ids = append(ids, string(m[1]))
	}
	if len(ids) == 0 {
		return nil, errors.New("the messages page listed no message")
	}
	static := func(p string) func(int) string { return func(int) string { return p } }
	group := "/ui/groups/" + store.FormatGroupID(gid)
	return []consolePage{
		{"overview", consoleOverviewP99, static("/ui/"), false},
		// What an open overview asks every 5 s: its content alone.
		{"overview (auto-refresh)", consoleOverviewP99, static("/ui/"), true},
		{"messages (pending)", consolePageP99, static("/ui/messages"), false},
		{"messages (largest queue)", consolePageP99, static("/ui/messages?source_queue=" + url.QueryEscape(bigQueue)), false},
		{"messages (group)", consolePageP99, static("/ui/messages?group=" + store.FormatGroupID(gid)), false},
		{"messages (all statuses)", consolePageP99, static("/ui/messages?status=all"), false},
		{"messages (500 a page)", consolePageP99, static("/ui/messages?size=500"), false},
		{"messages (by failed time)", consolePageP99, static("/ui/messages?sort=failed"), false},
		{"messages (by failed time, all statuses)", consolePageP99, static("/ui/messages?sort=failed&status=all"), false},
		{"messages (by queue)", consolePageP99, static("/ui/messages?sort=queue"), false},
		{"messages (search: declined by issuer)", consolePageP99, static("/ui/messages?q=" + url.QueryEscape("declined by issuer")), false},
		{"message", consolePageP99, func(i int) string { return "/ui/messages/" + ids[i%len(ids)] }, false},
		{"edit and replay", consolePageP99, func(i int) string { return "/ui/messages/" + ids[i%len(ids)] + "/edit" }, false},
		{"failure groups", consolePageP99, static("/ui/groups"), false},
		{"failure group", consolePageP99, static(group), false},
		{"replays", consolePageP99, static("/ui/replays"), false},
		{"approvals", consolePageP99, static("/ui/approvals"), false},
		{"jobs and alerts", consolePageP99, static("/ui/jobs"), false},
		{"audit", consolePageP99, static("/ui/audit"), false},
	}, nil
}

// measurePage times iterations requests of a page after 10 to warm up,
// prints its line and reports whether it missed a target (its p99, or
// its largest answer with the assets).
func measurePage(ctx context.Context, s consoleSession, p consolePage, iterations, assets int) (apiResult, bool, error) {
	for i := range 10 {
		if _, err := s.fetch(ctx, p.path(i), true, p.refresh); err != nil {
			return apiResult{}, false, err
		}
	}
	lat := make([]time.Duration, 0, iterations)
	size := 0
	for i := range iterations {
		t := time.Now()
		b, err := s.fetch(ctx, p.path(i+10), true, p.refresh)
		if err != nil {
			return apiResult{}, false, err
		}
		lat = append(lat, time.Since(t))
		size = max(size, len(b))
	}
	slices.Sort(lat)
	p99 := pct(lat, 0.99)
	missed := p99 >= p.limit || size+assets >= consolePageBytes
	verdict := "ok"
	if missed {
		verdict = "MISSED"
	}
	load := strconv.FormatFloat(loadAvg(), 'f', 2, 64)
	r := apiResult{Bench: "console", Name: p.name, N: iterations, P50ms: ms(pct(lat, 0.50)), P99ms: ms(p99), MaxMs: ms(lat[len(lat)-1]), Rows: size,
		Note: fmt.Sprintf("largest page %d bytes gzipped + %d of assets; target p99 < %s, < %d KB; %s; load %s", size, assets, p.limit, consolePageBytes>>10, verdict, load)}
	fmt.Printf("%-40s p50 %7.2f ms  p99 %7.2f ms (< %s)  max %7.2f ms  %6.1f KB with assets (< %d KB)  %s  (load %s)\n",
		p.name, r.P50ms, r.P99ms, p.limit, r.MaxMs, float64(size+assets)/1024, consolePageBytes>>10, verdict, load)
	return r, missed, nil
}

// appendResults appends results to the file at path as JSON lines.
func appendResults(path string, results []apiResult) error {
	f, err := os.OpenFile(path, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		return err
	}
	defer f.Close()
	for _, r := range results {
		b, err := json.Marshal(r)
		if err != nil {
			return err
		}
		if _, err := fmt.Fprintf(f, "%s\n", b); err != nil {
			return err
		}
	}
	return nil
}
