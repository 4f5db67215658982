package bench

import (
	"bytes"
	"context"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

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
	row, _, _ := g.message(i)
	return row
}

// message returns the COPY values of message i, with its headers whole
// and the part of them its row leaves out (empty when stored whole).
func (g *rowGen) message(i int) (row []any, headers []byte, death store.Span) {
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
	// The values are drawn in the order earlier generators drew them, and
	// written with the keys in order, as ingest writes a header table.
	tenant := r.IntN(500)
	customer := benchFirstNames[r.IntN(len(benchFirstNames))] + " " + benchLastNames[r.IntN(len(benchLastNames))]
	trace := randHex(r, 8)
	var errorType, errorMessage string
	if reason == "rejected" || reason == "delivery_limit" {
		t := pickWeighted(r)
		f := benchFailures[t]
		m := f.msg(r)
		fail := map[string]string{"type": f.typ, "message": m, "origin": "generic"}
		if f.typ == "java.lang.NullPointerException" {
			fail["stack"] = benchStack(r)
		}
		fb, _ := json.Marshal(fail)
		failure, ftype, fmsg = fb, f.typ, m
		group = g.groupID(queue, reason, t, f.typ, m)
		errorType, errorMessage = f.typ, m
	} else {
		group = g.groupID(queue, reason, -1, "", "")
	}
	hdr, deathFrom, deathTo := appendBenchHeaders(g.buf[:0], tenant, trace, customer, queue, reason, errorType, errorMessage, failedAt)
	headers = slices.Clone(hdr)
	g.buf = hdr

	msgID := randHex(r, 16)
	props := []byte(`{"content_type":"application/json","delivery_mode":2,"message_id":"` + msgID + `"}`)
	body := g.body(id)

	status, replayCount, replayedAt, ackAt := g.resting(failedAt)
	nm := store.NewMessage{MessageID: msgID, Headers: headers}
	if ftype != nil {
		nm.FailureType, nm.FailureMessage = ftype.(string), fmsg.(string)
	}
	keys := store.SearchKeys(&nm)
	if failure != nil {
		nm.Failure = failure.([]byte)
	}
	var searchText any
	if t := store.HeaderText(headers, nm.FailureType, nm.FailureMessage, ""); t != "" {
		searchText = t
	}
	// The death record ingest stores with the headers above, and the
	// headers as ingest stores them: without the x-death member when the
	// record rebuilds it byte for byte (broker.RestoreDeathHeader), so
	// that every read pays the rebuild as it does on ingested rows.
	xDeath := broker.AppendDeathsJSON(nil, []broker.Death{{Queue: queue, Reason: reason, Exchange: "app",
		RoutingKeys: []string{queue + ".created"}, Count: 1, Time: failedAt.UTC().Truncate(time.Second)}})
	stored, death := storedHeaders(headers, deathFrom, deathTo, xDeath)
	return []any{id, msgID, queue, "app", queue + ".created", "dlq", reason, int64(1), failure, ftype, fmsg,
		props, stored, body, len(body), status, replayCount, failedAt, failedAt, replayedAt, ackAt, failedAt,
		int64(r.Uint64() >> 1), group, keys, store.KeyHashes(keys), xDeath, store.BodyTextBytes(body, props), searchText}, headers, death
}

// appendBenchHeaders appends a generated message's headers as ingest
// stores a header table (keys in order) and returns where its x-death
// member starts and ends.
func appendBenchHeaders(hdr []byte, tenant int, trace, customer, queue, reason, errorType, errorMessage string, failedAt time.Time) (_ []byte, deathFrom, deathTo int) {
	hdr = append(hdr, `{"tenant":"tenant-`...)
	hdr = strconv.AppendInt(hdr, int64(tenant), 10)
	hdr = append(hdr, `","trace-id":"`...)
	hdr = append(hdr, trace...)
	hdr = append(hdr, `","x-customer":`...)
	hdr = appendJSONString(hdr, customer)
	deathFrom = len(hdr)
	hdr = append(hdr, `,"x-death":[{"count":{"type":"int64","value":1},"exchange":"app","queue":"`...)
	hdr = append(hdr, queue...)
	hdr = append(hdr, `","reason":"`...)
	hdr = append(hdr, reason...)
	hdr = append(hdr, `","routing-keys":["`...)
	hdr = append(hdr, queue...)
	hdr = append(hdr, `.created"],"time":{"type":"timestamp","value":"`...)
	hdr = failedAt.UTC().Truncate(time.Second).AppendFormat(hdr, time.RFC3339)
	hdr = append(hdr, `"}}]`...)
	deathTo = len(hdr)
	if errorType != "" {
		hdr = append(hdr, `,"x-error-message":`...)
		hdr = appendJSONString(hdr, errorMessage)
		hdr = append(hdr, `,"x-exception-type":`...)
		hdr = appendJSONString(hdr, errorType)
	}
	hdr = append(hdr, `,"x-first-death-exchange":"app","x-first-death-queue":"`...)
	hdr = append(hdr, queue...)
	hdr = append(hdr, `","x-first-death-reason":"`...)
	hdr = append(hdr, reason...)
	hdr = append(hdr, `"}`...)
	return hdr, deathFrom, deathTo
}

// resting draws what became of a message that failed at failedAt: older
// than a week, 35% acknowledged and 20% replayed; newer, 8% and 4%; one
// in a hundred a repeat failure, still pending.
func (g *rowGen) resting(failedAt time.Time) (status string, replayCount int, replayedAt, ackAt any) {
	age := g.start.Add(g.span).Sub(failedAt)
	status = "pending"
	x := g.r.IntN(100)
	switch {
	case age > 7*24*time.Hour && x < 35, age <= 7*24*time.Hour && x < 8:
		status = "acknowledged"
		ackAt = failedAt.Add(time.Hour)
	case age > 7*24*time.Hour && x < 55, age <= 7*24*time.Hour && x < 12:
		status = "replayed"
		replayedAt = failedAt.Add(30 * time.Minute)
		replayCount = 1
	case x == 99:
		replayCount = 1 + g.r.IntN(3) // a repeat failure
	}
	return status, replayCount, replayedAt, ackAt
}

// storedHeaders returns headers without their x-death member [from, to),
// or whole when the death record would not rebuild it exactly: ingest's
// rule (broker.RawTable.AppendJSONDeathSpan).
func storedHeaders(headers []byte, from, to int, xDeath []byte) ([]byte, store.Span) {
	without := slices.Concat(headers[:from], headers[to:])
	if !bytes.Equal(broker.RestoreDeathHeader(without, xDeath), headers) {
		return headers, store.Span{}
	}
	return without, store.Span{From: from, To: to}
}

var genColumns = []string{"id", "message_id", "source_queue", "source_exchange", "source_routing_key", "dead_letter_queue",
	"reason", "death_count", "failure", "failure_type", "failure_message", "properties", "headers", "body", "body_size",
	"status", "replay_count", "first_failed_at", "failed_at", "replayed_at", "acknowledged_at", "status_changed_at",
	"fingerprint", "group_id", "search_keys", "search_hashes", "x_death", "body_text_bytes", "search_text"}

// genXDeath is the place of x_death in a generated row.
var genXDeath = slices.Index(genColumns, "x_death")

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
	admin, err := store.OpenBenchAdmin(ctx, o.pgURL)
	if err != nil {
		return fmt.Errorf("%w (does database bench exist? `make bench-limits` creates it)", err)
	}
	defer admin.Close(ctx)
	if o.reuse {
		n, err := admin.CountSchemaMessages(ctx, o.schema)
		if err == nil && n == int64(o.n) {
			fmt.Printf("reusing schema %s with %d messages\n", o.schema, n)
			return nil
		}
		fmt.Printf("schema %s not reusable (%v, %d rows); generating\n", o.schema, err, n)
	}
	if err := admin.DropSchema(ctx, o.schema); err != nil {
		return err
	}
	if err := admin.CreateSchema(ctx, o.schema); err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4, TextSearch: true})
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := st.Migrate(ctx, nil); err != nil {
		return err
	}
	sb := st.Bench()
	indexes, err := sb.SecondaryIndexes(ctx, o.schema)
	if err != nil {
		return err
	}
	for _, ix := range indexes {
		if err := sb.DropIndex(ctx, o.schema, ix.Name); err != nil {
			return err
		}
	}

	start := time.Now()
	if err := generateRows(ctx, sb, o.n); err != nil {
		return err
	}
	fmt.Printf("generated %d messages in %s\n", o.n, time.Since(start).Round(time.Second))
	nGroups, err := finishSchema(ctx, sb, indexes, strings.Split(o.withoutIdx, ","))
	if err != nil {
		return err
	}
	size, _ := sb.MessagesSize(ctx)
	fmt.Printf("schema %s ready in %s: %d messages, %d groups, dead_messages %s with indexes\n",
		o.schema, time.Since(start).Round(time.Second), o.n, nGroups, size)
	return nil
}

// generateRows writes n messages, their failed times spread over the last
// 30 days, in a stream a core, each in transactions of 500,000 rows (to
// keep WAL and memory in check).
func generateRows(ctx context.Context, sb store.Bench, n int) error {
	now := time.Now().UTC()
	span := 30 * 24 * time.Hour
	streams := max(2, runtime.NumCPU())
	groups := map[groupKey]int64{}
	var mu sync.Mutex
	eg, gctx := errgroup.WithContext(ctx)
	per := (n + streams - 1) / streams
	for s := range streams {
		lo, hi := s*per, min(n, (s+1)*per)
		eg.Go(func() error {
			r := rand.New(rand.NewPCG(uint64(s), 42))
			g := &rowGen{r: r, n: n, start: now.Add(-span), span: span, groups: groups, groupsMu: &mu,
				zipf: rand.NewZipf(r, 1.1, 1, uint64(len(benchQueues)-1))}
			for c := lo; c < hi; c += 500_000 {
				end := min(hi, c+500_000)
				i := c
				_, err := sb.CopyMessages(gctx, genColumns, func() ([]any, error) {
					if i >= end {
						return nil, nil
					}
					row := g.row(i)
					i++
					return row, nil
				})
				if err != nil {
					return fmt.Errorf("copy rows %d-%d: %w", c, end, err)
				}
			}
			return nil
		})
	}
	return eg.Wait()
}

// finishSchema builds the secondary indexes (but those named in without),
// derives the counter tables ingest keeps from the rows and vacuums; it
// returns how many failure groups there are.
func finishSchema(ctx context.Context, sb store.Bench, indexes []store.BenchIndex, without []string) (nGroups int, err error) {
	err = sb.Maintenance(ctx, func(m store.Bench) error {
		for _, ix := range indexes {
			if slices.Contains(without, ix.Name) {
				fmt.Printf("index %s left unbuilt (-without-indexes)\n", ix.Name)
				continue
			}
			t := time.Now()
			if err := m.CreateIndex(ctx, ix); err != nil {
				return err
			}
			fmt.Printf("index %s built in %s\n", ix.Name, time.Since(t).Round(time.Second))
		}
		// The counter tables ingest keeps, derived from the rows; the
		// groups' patterns come from the same normalisation ingest uses.
		type step struct {
			name string
			run  func(context.Context) error
		}
		steps := []step{
			{"id sequence", m.SyncIDSequence},
			{"queue_summary", m.DeriveQueueSummary},
			{"failure_groups", func(ctx context.Context) (err error) { nGroups, err = m.DeriveFailureGroups(ctx); return err }},
			{"queue_activity", m.DeriveQueueActivity},
		}
		for _, table := range []string{"dead_messages", "failure_groups", "queue_summary", "queue_activity"} {
			steps = append(steps, step{"VACUUM ANALYZE " + table, func(ctx context.Context) error { return m.VacuumAnalyze(ctx, table) }})
		}
		for _, step := range steps {
			t := time.Now()
			if err := step.run(ctx); err != nil {
				return err
			}
			fmt.Printf("%s done in %s\n", step.name, time.Since(t).Round(time.Second))
		}
		return nil
	})
	return nGroups, err
}
