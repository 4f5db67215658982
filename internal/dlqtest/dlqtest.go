package dlqtest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net/url"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// DatabaseURLBase is the database tests create their schemas in.
func DatabaseURLBase() string {
	if v := os.Getenv("TEST_DATABASE_URL"); v != "" {
		return v
	}
	return "postgres://postgres@127.0.0.1:5432/test?sslmode=disable"
}

// AMQPURL is the broker tests use.
func AMQPURL() string {
	if v := os.Getenv("DLQ_TEST_AMQP_URL"); v != "" {
		return v
	}
	return "amqp://guest:guest@127.0.0.1:5672/"
}

var unsafeChars = regexp.MustCompile(`[^a-z0-9_]+`)

// Name returns a name unique to this test run, readable in the broker's
// and database's listings: prefix, the test's name, random suffix.
func Name(t testing.TB, prefix string) string {
	var b [4]byte
	_, _ = rand.Read(b[:])
	n := strings.ToLower(t.Name())
	n = unsafeChars.ReplaceAllString(n, "_")
	if len(n) > 40 {
		n = n[len(n)-40:]
	}
	return fmt.Sprintf("%s_%s_%s", prefix, strings.Trim(n, "_"), hex.EncodeToString(b[:]))
}

// Schema creates an empty schema and returns a database URL whose
// search_path points at it. The schema is dropped when the test ends.
func Schema(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	schema := Name(t, "t")
	conn, err := pgx.Connect(ctx, DatabaseURLBase())
	require.NoError(t, err, "connect to test database %s (is PostgreSQL up? run scripts/services.sh)", DatabaseURLBase())
	defer conn.Close(ctx)
	_, err = conn.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schema}.Sanitize())
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, DatabaseURLBase())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{schema}.Sanitize()+" CASCADE")
	})
	// public stays on the path so extensions installed there (pg_trgm)
	// resolve.
	return WithSearchPath(DatabaseURLBase(), schema+",public")
}

// Database creates an empty database of the test's own on the test
// server and returns its URL (schema public); it is dropped when the test
// ends. For what a schema does not isolate: CREATE INDEX CONCURRENTLY waits
// for every older transaction of its database, other tests' included, and
// an old dlq migrates the public schema under a lock every database's
// public schema shares.
func Database(t testing.TB) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	name := Name(t, "d")
	conn, err := pgx.Connect(ctx, DatabaseURLBase())
	require.NoError(t, err, "connect to test database %s (is PostgreSQL up? run scripts/services.sh)", DatabaseURLBase())
	defer conn.Close(ctx)
	// template0: template1 refuses to be copied while anyone is connected to it.
	_, err = conn.Exec(ctx, "CREATE DATABASE "+pgx.Identifier{name}.Sanitize()+" TEMPLATE template0")
	require.NoError(t, err)
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		c, err := pgx.Connect(ctx, DatabaseURLBase())
		if err != nil {
			return
		}
		defer c.Close(ctx)
		_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+pgx.Identifier{name}.Sanitize()+" WITH (FORCE)")
	})
	u, err := url.Parse(DatabaseURLBase())
	require.NoError(t, err)
	u.Path = "/" + name
	return u.String()
}

// WithSearchPath returns dsn with search_path set to schema.
func WithSearchPath(dsn, schema string) string {
	u, err := url.Parse(dsn)
	if err != nil {
		panic(err)
	}
	q := u.Query()
	q.Set("search_path", schema)
	u.RawQuery = q.Encode()
	return u.String()
}

// Store opens a store on a fresh, migrated schema, with text search on
// (Config.TextSearch, as in dlq serve by default; IndexText writes the
// documents dlq serve's indexer would). It returns the store and its database URL (for a dlq subprocess to
// share the schema).
func Store(t testing.TB) (*store.Store, string) {
	t.Helper()
	dsn := Schema(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 8, TextSearch: true})
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(ctx, nil)
	require.NoError(t, err)
	return st, dsn
}

// ThroughClosedStore runs f on a store of its own on dsn's migrated schema,
// closed as soon as f returns. A backend writes its table statistics
// (pg_stat_user_tables) when it ends; one that goes on can hold them back
// for PostgreSQL's idle interval (10 s) after a recent write. Tests that
// wait for the statistics of the rows they store store them this way.
func ThroughClosedStore(t testing.TB, dsn string, f func(*store.Store)) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	st, err := store.Open(ctx, store.Config{DatabaseURL: dsn, MaxConns: 1, TextSearch: true})
	require.NoError(t, err)
	defer st.Close()
	f(st)
}

// IndexText writes the text search documents of every row waiting for
// one (what dlq serve's indexer, package textindex, does in the
// background), batch after batch until nothing waits, and returns how
// many rows it took. Rows above the indexer's mark wait until the
// transactions writing dead_messages when it saw them have ended: it
// polls meanwhile. It fails the test after 60 seconds.
func IndexText(t testing.TB, st *store.Store) int {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	total := 0
	for {
		res, err := st.IndexText(ctx, 0)
		require.NoError(t, err, "index text")
		total += res.Rows
		switch {
		case res.Rows == 0 && !res.More:
			return total
		case res.Rows == 0:
			select {
			case <-ctx.Done():
				require.NoError(t, ctx.Err(), "index text: rows above the mark still wait")
			case <-time.After(5 * time.Millisecond):
			}
		}
	}
}

// DB opens a small pool of its own on dsn, the database URL Schema or Store
// returned, for a test that reads or changes rows with SQL to set up a case
// or check what happened. It is the tests' way to the schema's database:
// store exposes no pool, and runtime code reaches PostgreSQL only through
// store's methods. The pool has none of a store's settings (no tracer) and
// is closed when the test ends, before the schema is dropped.
//
// Open it once per test (or per test bundle, kept beside the store) rather
// than on every query: each call opens connections of its own.
func DB(t testing.TB, dsn string) *pgxpool.Pool {
	t.Helper()
	// An empty URL would parse as libpq's defaults: some other database.
	require.NotEmpty(t, dsn, "dlqtest.DB needs the test schema's database URL (from Schema or Store)")
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err, "parse test database URL")
	// Enough for a test that holds a transaction open while it watches
	// from another connection; the store under test has its own.
	cfg.MaxConns = 4
	cfg.ConnConfig.ConnectTimeout = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	require.NoError(t, err, "open a test pool on the schema's database")
	t.Cleanup(pool.Close)
	return pool
}

// Dial opens an AMQP connection for the test's application side.
func Dial(t testing.TB) *amqp.Connection {
	t.Helper()
	conn, err := amqp.Dial(AMQPURL())
	require.NoError(t, err, "connect to RabbitMQ at %s (is it up? run scripts/services.sh)", AMQPURL())
	t.Cleanup(func() { _ = conn.Close() })
	return conn
}

// Channel opens a channel on conn, closed when the test ends.
func Channel(t testing.TB, conn *amqp.Connection) *amqp.Channel {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	t.Cleanup(func() { _ = ch.Close() })
	return ch
}

// Eventually polls cond every 20ms until it returns true or timeout
// passes, then fails the test with msg.
func Eventually(t testing.TB, timeout time.Duration, cond func() bool, msg string, args ...any) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		if cond() {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %s: "+msg, append([]any{timeout}, args...)...)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// QueueDepth returns the number of ready messages in queue (passive
// declare on a throwaway channel).
func QueueDepth(t testing.TB, conn *amqp.Connection, queue string) int {
	t.Helper()
	ch, err := conn.Channel()
	require.NoError(t, err)
	defer ch.Close()
	q, err := ch.QueueDeclarePassive(queue, true, false, false, false, nil)
	require.NoError(t, err, "inspect queue %q", queue)
	return q.Messages
}

// DeleteQueues deletes queues when the test ends (best effort).
func DeleteQueues(t testing.TB, conn *amqp.Connection, queues ...string) {
	t.Cleanup(func() {
		ch, err := conn.Channel()
		if err != nil {
			c, err := amqp.Dial(AMQPURL())
			if err != nil {
				return
			}
			defer c.Close()
			if ch, err = c.Channel(); err != nil {
				return
			}
		}
		defer ch.Close()
		for _, q := range queues {
			_, _ = ch.QueueDelete(q, false, false, false)
		}
	})
}

// DeleteExchanges deletes exchanges when the test ends (best effort).
func DeleteExchanges(t testing.TB, conn *amqp.Connection, exchanges ...string) {
	t.Cleanup(func() {
		c, err := amqp.Dial(AMQPURL())
		if err != nil {
			return
		}
		defer c.Close()
		ch, err := c.Channel()
		if err != nil {
			return
		}
		defer ch.Close()
		for _, e := range exchanges {
			_ = ch.ExchangeDelete(e, false, false)
		}
	})
}
