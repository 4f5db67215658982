package store_test

import (
	"context"
	"fmt"
	"io/fs"
	"math/rand/v2"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/migrations"
	"github.com/dlq/dlq/store"
)

// TestMigrationLocks applies every migration after the baseline, one at a
// time and in order, to a database holding rows while an older dlq's
// traffic runs on it (docs/UPGRADING.md, "Migrations"):
//
//   - a writer commits small batches of rows with the baseline's columns,
//     as an older dlq's ingest does;
//   - a replay-claim-like UPDATE claims a few pending rows and puts them
//     back;
//   - a reader lists the newest pending rows;
//   - a long transaction (a bulk acknowledge, a pg_dump, an export) holds
//     a row of dead_messages for longLockHold at a time, with pauses: a
//     statement that waits for a lock behind it without lock_timeout
//     makes every later one of the table wait too.
//
// Each migration fails the test when one of them waited longer than
// store.MaxMigrationStall between two commits while it ran, and, so that a
// small table shows what only a large one would take long over, when it
// rewrote a table with rows, changed rows that existed before it, or built
// an index on a table with rows without CONCURRENTLY (each of which stops
// ingest for minutes at 10 million rows). New migrations are covered as
// they are added: the list is migrations.FS.
//
// DLQ_TEST_LOCK_ROWS sets how many rows are seeded (default 20,000).
func TestMigrationLocks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	seeded := 20_000
	if v := os.Getenv("DLQ_TEST_LOCK_ROWS"); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "DLQ_TEST_LOCK_ROWS")
		seeded = n
	}
	// A database of the test's own: CREATE INDEX CONCURRENTLY waits for
	// every older transaction of its database, and other tests' would
	// make it slow, not wrong.
	dsn := dlqtest.Database(t)
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 4})
	require.NoError(t, err)
	defer st.Close()
	_, err = st.MigrateTo(ctx, nil, migrations.Baseline)
	require.NoError(t, err)
	db := dlqtest.DB(t, dsn)

	seedStart := time.Now()
	_, err = db.Exec(ctx, baselineInsert, 1, seeded)
	require.NoError(t, err)
	var seedMax int64
	require.NoError(t, db.QueryRow(ctx, `SELECT max(id) FROM dead_messages`).Scan(&seedMax))
	_, err = db.Exec(ctx, `ANALYZE dead_messages`)
	require.NoError(t, err)
	t.Logf("seeded %d rows in %s", seeded, time.Since(seedStart).Round(time.Millisecond))

	// The row the long transaction holds: written after the seed (whose
	// rows must stay untouched), acknowledged (no claim takes it).
	var held int64
	require.NoError(t, db.QueryRow(ctx, `WITH r AS (`+strings.Replace(baselineInsert, "'pending'", "'acknowledged'", 1)+` RETURNING id)
SELECT id FROM r`, seeded+1, 1).Scan(&held))

	for _, v := range migrationsAfter(t, migrations.Baseline) {
		applied := false
		t.Run(v.Name, func(t *testing.T) {
			l := startLockLoad(t, dsn, held, seedMax)
			tables := relfilenodes(t, db)
			var xmins []string
			require.NoError(t, db.QueryRow(ctx, `SELECT array_agg(DISTINCT xmin::text) FROM dead_messages WHERE id <= $1`, seedMax).Scan(&xmins))
			builds := watchIndexBuilds(t, dsn)
			began := time.Now()
			res, err := st.MigrateTo(ctx, nil, v.Version)
			took := time.Since(began)
			nonConcurrent := builds.stop()
			gaps := l.stop(t, began, began.Add(took))
			require.NoError(t, err)
			require.Equal(t, []string{v.Name}, res.Applied)
			applied = true
			t.Logf("%s: applied in %s; longest waits between commits: %v", v.Name, took.Round(time.Millisecond), gaps)

			for actor, gap := range gaps {
				switch {
				case gap.d <= store.MaxMigrationStall:
				case gap.lock:
					t.Errorf("%s: the %s waited %s between two commits while it ran (more than %s), waiting for a lock: a lock that stops ingest, replay claims or reads was held or waited for too long",
						v.Name, actor, gap.d.Round(time.Millisecond), store.MaxMigrationStall)
				default:
					// No lock wait seen in the gap (sampled every
					// lockSampleEvery): the machine stalled the actor, not
					// the migration.
					t.Logf("%s: the %s waited %s between two commits, never for a lock: the machine's load, not counted",
						v.Name, actor, gap.d.Round(time.Millisecond))
				}
			}
			for table, before := range tables {
				after, ok := relfilenodes(t, db)[table]
				if ok && after != before && hasRows(t, db, table) {
					t.Errorf("%s rewrote table %s, which has rows: a rewrite holds ACCESS EXCLUSIVE for as long as it copies the table", v.Name, table)
				}
			}
			var changed int
			require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM dead_messages WHERE id <= $1 AND xmin::text <> ALL($2)`, seedMax, xmins).Scan(&changed))
			if changed > 0 {
				t.Errorf("%s changed %d rows that existed before it: work over existing rows belongs in a backfill (store/backfill.go), not in a migration", v.Name, changed)
			}
			for _, ix := range nonConcurrent {
				if hasRows(t, db, ix.table) {
					t.Errorf("%s built index %s on %s, which has rows, without CONCURRENTLY: ingest waits for the whole build", v.Name, ix.index, ix.table)
				}
			}
			var invalid []string
			require.NoError(t, db.QueryRow(ctx, `SELECT coalesce(array_agg(indexrelid::regclass::text), '{}') FROM pg_index i
JOIN pg_class c ON c.oid = i.indexrelid WHERE c.relnamespace = current_schema()::regnamespace AND NOT i.indisvalid`).Scan(&invalid))
			if len(invalid) > 0 {
				t.Errorf("%s left invalid indexes %v: a CONCURRENTLY build that failed (a lock_timeout?) and was not built again", v.Name, invalid)
			}
			requireRunsAgain(t, st, db, v)
		})
		if !applied {
			// The later migrations would run on a schema the failed one
			// left half done. (One that was applied but stalled the load
			// lets the next ones be measured too.)
			return
		}
	}
}

// requireRunsAgain checks that a NO TRANSACTION migration, each of whose
// statements commits on its own, can run again after an attempt that
// stopped half way (store.Migrate tries a migration that timed out
// waiting for a lock again): run again whole, it changes nothing, neither
// in the catalogue nor in any table's row count.
func requireRunsAgain(t *testing.T, st *store.Store, db *pgxpool.Pool, v migrations.File) {
	t.Helper()
	ctx := context.Background()
	src, err := fs.ReadFile(migrations.FS, v.Name)
	require.NoError(t, err)
	if !strings.Contains(string(src), "-- +goose NO TRANSACTION") {
		return // rolled back whole when it stops half way
	}
	shape := func() string {
		t.Helper()
		var catalogue string
		require.NoError(t, db.QueryRow(ctx, `
SELECT string_agg(x, E'\n' ORDER BY x) FROM (
    SELECT relkind::text || ' ' || relname AS x FROM pg_class WHERE relnamespace = current_schema()::regnamespace
    UNION ALL SELECT 'column ' || attrelid::regclass || '.' || attname FROM pg_attribute a JOIN pg_class c ON c.oid = a.attrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r' AND a.attnum > 0 AND NOT a.attisdropped
    UNION ALL SELECT 'trigger ' || tgname FROM pg_trigger g JOIN pg_class c ON c.oid = g.tgrelid
        WHERE c.relnamespace = current_schema()::regnamespace AND NOT g.tgisinternal
    UNION ALL SELECT 'function ' || oid::regprocedure FROM pg_proc WHERE pronamespace = current_schema()::regnamespace) s`).Scan(&catalogue))
		var b strings.Builder
		b.WriteString(catalogue)
		var tables []string
		for table := range relfilenodes(t, db) {
			if table != "goose_db_version" {
				tables = append(tables, table)
			}
		}
		slices.Sort(tables)
		for _, table := range tables {
			var n int64
			require.NoError(t, db.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{table}.Sanitize()).Scan(&n))
			fmt.Fprintf(&b, "\nrows %s %d", table, n)
		}
		return b.String()
	}
	before := shape()
	_, err = db.Exec(ctx, `DELETE FROM goose_db_version WHERE version_id = $1`, v.Version)
	require.NoError(t, err)
	res, err := st.MigrateTo(ctx, nil, v.Version)
	require.NoError(t, err, "%s cannot run again after an attempt that stopped half way", v.Name)
	require.Equal(t, []string{v.Name}, res.Applied)
	require.Equal(t, before, shape(), "%s changed something when it ran again: an attempt that stopped half way runs again whole", v.Name)
}

// baselineInsert writes $2 rows numbered from $1 with the columns of the
// baseline schema, as an older dlq's ingest does (its COPY names the same
// columns): a death record in the headers, a 1 KB JSON body.
const baselineInsert = `
INSERT INTO dead_messages (message_id, source_queue, source_exchange, source_routing_key, dead_letter_queue, reason,
    death_count, failure, failure_type, failure_message, properties, headers, body, body_size, first_failed_at, failed_at,
    fingerprint, ingest_batch, search_keys, ingest_returns, status)
SELECT 'lock-' || g, 'orders.work' || g % 5, 'orders', 'orders.created', 'dlq', 'rejected', 1 + g % 3,
    jsonb_build_object('type', 'ValidationError', 'message', 'order ' || g || ' failed validation'),
    'ValidationError', 'order ' || g || ' failed validation',
    '{"content_type":"application/json","delivery_mode":2}'::json,
    ('{"tenant":"acme","x-death":[{"count":{"type":"int64","value":' || 1 + g % 3
     || '},"exchange":"orders","queue":"orders.work' || g % 5 || '","reason":"rejected","routing-keys":["orders.created"],'
     || '"time":{"type":"timestamp","value":"2026-11-20T10:00:00Z"}}],"x-first-death-queue":"orders.work"}')::json,
    convert_to('{"order":"' || g || '","pad":"' || repeat('x', 1000) || '"}', 'UTF8'), 1024,
    now(), now(), g, NULL, ARRAY['lock-' || g], 1, 'pending'
FROM generate_series($1::bigint, $1::bigint + $2 - 1) g`

// migrationsAfter lists the migrations numbered above version, in order.
func migrationsAfter(t *testing.T, version int64) []migrations.File {
	t.Helper()
	files, err := migrations.Files()
	require.NoError(t, err)
	var out []migrations.File
	for _, f := range files {
		if f.Version > version {
			out = append(out, f)
		}
	}
	require.NotEmpty(t, out)
	return out
}

// relfilenodes maps each table of the schema to its storage file: a
// rewrite gives the table a new one.
func relfilenodes(t *testing.T, db interface {
	Query(context.Context, string, ...any) (pgx.Rows, error)
}) map[string]uint32 {
	t.Helper()
	rows, err := db.Query(context.Background(), `
SELECT relname, relfilenode FROM pg_class WHERE relkind = 'r' AND relnamespace = current_schema()::regnamespace`)
	require.NoError(t, err)
	out := map[string]uint32{}
	for rows.Next() {
		var name string
		var node uint32
		require.NoError(t, rows.Scan(&name, &node))
		out[name] = node
	}
	require.NoError(t, rows.Err())
	return out
}

func hasRows(t *testing.T, db interface {
	QueryRow(context.Context, string, ...any) pgx.Row
}, table string) bool {
	t.Helper()
	var ok bool
	require.NoError(t, db.QueryRow(context.Background(), `SELECT EXISTS (SELECT 1 FROM `+pgx.Identifier{table}.Sanitize()+`)`).Scan(&ok))
	return ok
}

// longLockHold is how long the load's long transaction holds its row,
// once, as the migration starts: longer than store.MaxMigrationStall, so
// that a statement that queues behind it without lock_timeout stalls
// everything after it for longer than the limit.
const longLockHold = 2 * time.Second

// lockLoad is an older dlq's traffic on the database while a migration
// runs: each actor records when each of its transactions committed.
type lockLoad struct {
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	mu      sync.Mutex
	commits map[string][]time.Time
	errs    []error
	// app names the load's connections (application_name app/actor), so
	// that the sampler sees which actor waits for a lock, and stop can
	// wait for their backends to end.
	app string
	dsn string
	// lockWaits are the moments the sampler saw an actor's backend wait
	// for a lock (pg_stat_activity.wait_event_type 'Lock').
	lockWaits map[string][]time.Time
}

// lockSampleEvery is how often the sampler looks at the load's backends.
const lockSampleEvery = 25 * time.Millisecond

// sampleLockWaits records, until ctx ends, which actors wait for a lock.
func (l *lockLoad) sampleLockWaits(ctx context.Context, t *testing.T) {
	c, err := pgx.Connect(ctx, l.dsn)
	require.NoError(t, err)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer c.Close(context.Background())
		tick := time.NewTicker(lockSampleEvery)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			rows, err := c.Query(ctx, `SELECT application_name FROM pg_stat_activity
WHERE application_name LIKE $1 AND wait_event_type = 'Lock'`, l.app+"/%")
			if err != nil {
				return // the load stops (or the database went): nothing to sample
			}
			names, err := pgx.CollectRows(rows, pgx.RowTo[string])
			if err != nil {
				return
			}
			now := time.Now()
			l.mu.Lock()
			for _, n := range names {
				actor := strings.TrimPrefix(n, l.app+"/")
				l.lockWaits[actor] = append(l.lockWaits[actor], now)
			}
			l.mu.Unlock()
		}
	}()
}

// waitedForLock reports whether the sampler saw actor wait for a lock
// in [from, to].
func (l *lockLoad) waitedForLock(actor string, from, to time.Time) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, at := range l.lockWaits[actor] {
		if !at.Before(from) && !at.After(to) {
			return true
		}
	}
	return false
}

func (l *lockLoad) committed(actor string) {
	l.mu.Lock()
	l.commits[actor] = append(l.commits[actor], time.Now())
	l.mu.Unlock()
}

func (l *lockLoad) count(actor string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.commits[actor])
}

// run runs one actor on a connection of its own until the load stops.
func (l *lockLoad) run(ctx context.Context, t *testing.T, dsn, actor string, step func(ctx context.Context, c *pgx.Conn) error) {
	cfg, err := pgx.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.RuntimeParams["application_name"] = l.app + "/" + actor
	c, err := pgx.ConnectConfig(ctx, cfg)
	require.NoError(t, err)
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		defer c.Close(context.Background())
		for ctx.Err() == nil {
			if err := step(ctx, c); err != nil {
				if ctx.Err() == nil {
					l.mu.Lock()
					l.errs = append(l.errs, fmt.Errorf("%s: %w", actor, err))
					l.mu.Unlock()
				}
				return
			}
			if actor != "long transaction" {
				l.committed(actor)
			}
			select {
			case <-ctx.Done():
			case <-time.After(loadPace):
			}
		}
	}()
}

// loadPace is the pause after each commit of an actor: traffic at a steady
// rate (the writer's 20 rows each time make about 1,000 dead letters a
// second, as in production), not three backends running flat out, which
// took 30 s of PostgreSQL's CPU from the rest of the suite. A lock that
// stops an actor for MaxMigrationStall shows whatever the pace.
const loadPace = 20 * time.Millisecond

// startLockLoad starts the traffic and returns once every actor has
// committed and the long transaction holds its row.
func startLockLoad(t *testing.T, dsn string, held, seedMax int64) *lockLoad {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	l := &lockLoad{cancel: cancel, commits: map[string][]time.Time{}, lockWaits: map[string][]time.Time{},
		app: fmt.Sprintf("locktest-%d", rand.Int64()), dsn: dsn}
	t.Cleanup(func() { cancel(); l.wg.Wait() })
	l.sampleLockWaits(ctx, t)
	var next int64 = 10_000_000
	l.run(ctx, t, dsn, "writer", func(ctx context.Context, c *pgx.Conn) error {
		next += 20
		_, err := c.Exec(ctx, baselineInsert, next, 20)
		return err
	})
	l.run(ctx, t, dsn, "replay claim", func(ctx context.Context, c *pgx.Conn) error {
		var ids []int64
		rows, err := c.Query(ctx, `
UPDATE dead_messages SET status = 'replaying', claim_owner = 'locktest', claim_expires_at = now() + interval '1 minute',
    status_changed_at = now()
WHERE id IN (SELECT id FROM dead_messages WHERE status = 'pending' AND id > $1 ORDER BY id DESC LIMIT 10 FOR UPDATE SKIP LOCKED)
RETURNING id`, seedMax)
		if err == nil {
			ids, err = pgx.CollectRows(rows, pgx.RowTo[int64])
		}
		if err != nil {
			return err
		}
		_, err = c.Exec(ctx, `UPDATE dead_messages SET status = 'pending', claim_owner = NULL, claim_expires_at = NULL WHERE id = ANY($1)`, ids)
		return err
	})
	l.run(ctx, t, dsn, "reader", func(ctx context.Context, c *pgx.Conn) error {
		_, err := c.Exec(ctx, `SELECT id, source_queue, failed_at, headers FROM dead_messages WHERE status = 'pending' ORDER BY id DESC LIMIT 50`)
		return err
	})
	holding := make(chan struct{})
	l.run(ctx, t, dsn, "long transaction", func(ctx context.Context, c *pgx.Conn) error {
		tx, err := c.Begin(ctx)
		if err != nil {
			return err
		}
		defer tx.Rollback(context.Background()) //nolint:errcheck // no-op after commit
		if _, err := tx.Exec(ctx, `UPDATE dead_messages SET status_changed_at = now() WHERE id = $1`, held); err != nil {
			return err
		}
		close(holding)
		select {
		case <-ctx.Done():
			return nil
		case <-time.After(longLockHold):
		}
		if err := tx.Commit(ctx); err != nil {
			return err
		}
		<-ctx.Done()
		return nil
	})
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		return l.count("writer") > 0 && l.count("replay claim") > 0 && l.count("reader") > 0
	}, "the load did not start")
	select {
	case <-holding:
	case <-time.After(30 * time.Second):
		t.Fatal("the long transaction did not take its row")
	}
	return l
}

// stop waits until every actor has committed after end, stops the load
// and returns each actor's longest wait between two commits around
// [begin, end]: from its last commit before begin to its first after end.
func (l *lockLoad) stop(t *testing.T, begin, end time.Time) map[string]lockGap {
	t.Helper()
	actors := []string{"writer", "replay claim", "reader"}
	dlqtest.Eventually(t, 60*time.Second, func() bool {
		l.mu.Lock()
		defer l.mu.Unlock()
		for _, a := range actors {
			c := l.commits[a]
			if len(c) == 0 || !c[len(c)-1].After(end) {
				return len(l.errs) > 0
			}
		}
		return true
	}, "the load did not commit again after the migration")
	l.cancel()
	l.wg.Wait()
	require.Empty(t, l.errs, "the older dlq's traffic failed")
	// A statement cut short by the cancellation may still commit on the
	// server after its client gave up: the load is over once its
	// backends have ended.
	c, err := pgx.Connect(context.Background(), l.dsn)
	require.NoError(t, err)
	defer c.Close(context.Background())
	dlqtest.Eventually(t, 30*time.Second, func() bool {
		var n int
		err := c.QueryRow(context.Background(), `SELECT count(*) FROM pg_stat_activity WHERE application_name LIKE $1`, l.app+"/%").Scan(&n)
		return err == nil && n == 0
	}, "the load's backends did not end")
	gaps := map[string]lockGap{}
	for _, a := range actors {
		c := l.commits[a]
		from := 0
		for i, at := range c {
			if at.Before(begin) {
				from = i
			}
		}
		for i := from + 1; i < len(c); i++ {
			if c[i-1].After(end) {
				break
			}
			if d := c[i].Sub(c[i-1]); d > gaps[a].d {
				gaps[a] = lockGap{d: d, from: c[i-1], to: c[i], lock: l.waitedForLock(a, c[i-1], c[i])}
			}
		}
	}
	return gaps
}

// lockGap is an actor's longest wait between two commits, and whether it
// waited for a lock then.
type lockGap struct {
	d        time.Duration
	from, to time.Time
	lock     bool
}

func (g lockGap) String() string {
	if g.lock {
		return g.d.Round(time.Millisecond).String() + " (waiting for a lock)"
	}
	return g.d.Round(time.Millisecond).String()
}

// indexBuild is an index build the watcher saw.
type indexBuild struct{ index, table string }

type buildWatch struct {
	cancel context.CancelFunc
	done   chan []indexBuild
}

func (w *buildWatch) stop() []indexBuild {
	w.cancel()
	return <-w.done
}

// watchIndexBuilds samples the database's index builds without
// CONCURRENTLY (pg_stat_progress_create_index) until stopped: at a few
// milliseconds, each is seen even over a table of a few thousand rows.
func watchIndexBuilds(t *testing.T, dsn string) *buildWatch {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	c, err := pgx.Connect(ctx, dsn)
	require.NoError(t, err)
	w := &buildWatch{cancel: cancel, done: make(chan []indexBuild, 1)}
	go func() {
		defer c.Close(context.Background())
		seen := map[indexBuild]bool{}
		for ctx.Err() == nil {
			rows, err := c.Query(ctx, `
SELECT coalesce(i.relname, p.index_relid::text), t.relname FROM pg_stat_progress_create_index p
JOIN pg_class t ON t.oid = p.relid LEFT JOIN pg_class i ON i.oid = p.index_relid
WHERE p.datid = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND p.command NOT LIKE '%CONCURRENTLY%'`)
			if err == nil {
				for rows.Next() {
					var b indexBuild
					if rows.Scan(&b.index, &b.table) == nil {
						seen[b] = true
					}
				}
				rows.Close()
			}
			time.Sleep(2 * time.Millisecond)
		}
		var out []indexBuild
		for b := range seen {
			out = append(out, b)
		}
		w.done <- out
	}()
	return w
}
