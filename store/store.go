package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/redact"
)

// Config configures a Store.
type Config struct {
	// DatabaseURL is a PostgreSQL connection string (URL or key=value).
	// Required.
	DatabaseURL string
	// MaxConns bounds the pool. Optional; default 10.
	MaxConns int32
	// Logger receives the store's logs. Optional; default slog.Default().
	Logger *slog.Logger
	// Registerer receives the store's metrics. Optional; nil registers none.
	Registerer prometheus.Registerer
	// Tracer sees every statement the pool's connections run (tracing,
	// and tests that check the plans of the queries really sent).
	// Optional.
	Tracer pgx.QueryTracer
	// Up, when set, is told by Watch whether PostgreSQL answers (the
	// dlq_up gauge). Optional.
	Up prometheus.Gauge
	// Encryption seals what the store writes (seal.go). Optional; nil
	// stores everything in plain text.
	Encryption *Encryption
	// TextSearch marks what of each message body written is text
	// (body_text_bytes) and queues the rows written for the text indexer
	// (textindex.go, package textindex), which writes their documents;
	// without it nothing is queued and new rows get no document. Optional;
	// off unless set (dlq serve sets it from ingest.text_search, on by
	// default).
	TextSearch bool
	// TextWalk is how many of the newest documents a text search reads
	// one by one before it asks the GIN index (textDocArm in
	// messages.go). Optional; TextWalkDefault when 0. Tests set it small
	// to cross from the walk to the index with few rows.
	TextWalk int
}

const maxConnsDefault = 10

// planEachTime, as a statement's first argument, has PostgreSQL plan it at
// every execution instead of once per connection. pgx prepares each
// statement on a connection once and PostgreSQL keeps a parameterless
// statement's plan (and, after five runs, often a parameterized one's)
// until the table's statistics change. dead_messages starts empty (the
// migration analyses it so) and grows by millions between ANALYZE runs,
// and none run at all where autovacuum is off: a plan made on the empty
// table reads max(id) or an id range by a sequential scan forever after.
// That cost the text indexer's step 140 ms and its gauge 350 ms at 300,000
// rows (docs/BENCHMARKS.md). A connection that matched its first
// redeliveries while the table was nearly empty (a new database) read it
// whole three times for each redelivery once it held millions (600,000
// rows for ten at 20,000 stored: TestRedeliveryMatchAfterTheTableGrew),
// and one that took back replayed messages that died again (each read and
// updated by its id) read it twice for each (360,000 rows for ten:
// TestReplayReturnAfterTheTableGrew). Statements that run all the time on
// a table that grows (the indexer's walk above its mark, the waiting
// gauge) or that must stay cheap on a large one when they come (a
// redelivery's match, a replay's return) take it; planning them costs
// tens of microseconds.
//
// The mode runs each statement as PostgreSQL's unnamed statement, planned
// at every execution with its values, and caches only the statement's
// description (its parameters' types), so that a json or bytea parameter
// is sent as what its column is: still one round trip. It needs pgx's
// description cache, which Open keeps on.
//
// Not plan_cache_mode=force_custom_plan for the whole session: that
// replans every statement, down to what PostgreSQL runs per row (the
// foreign-key check of each of the text indexer's documents), and its
// cost measured at nothing either way (docs/BENCHMARKS.md). Statements
// that only go wrong once a table has grown, and are not among these,
// are planned again after an ANALYZE: autovacuum's, or the statistics
// job's where autovacuum is off (RefreshStatistics).
const planEachTime = pgx.QueryExecModeCacheDescribe

// descriptionCacheMin is the description cache Open keeps when the
// database URL turns it off (description_cache_capacity=0): planEachTime's
// statements would otherwise fail. They are a handful.
const descriptionCacheMin = 32

func (c *Config) validate() error {
	if c.DatabaseURL == "" {
		return errors.New("store: DatabaseURL is required")
	}
	if c.MaxConns < 0 {
		return fmt.Errorf("store: MaxConns must be >= 0, got %d", c.MaxConns)
	}
	if c.Encryption != nil && c.Encryption.Ring == nil {
		return errors.New("store: Encryption.Ring is required with Encryption")
	}
	return nil
}

// Store is dlq's handle on PostgreSQL. It is safe for concurrent use.
type Store struct {
	pool     *pgxpool.Pool
	log      *slog.Logger
	up       prometheus.Gauge // nil: not reported
	enc      *encState        // nil: encryption off
	text     bool             // Config.TextSearch
	textWalk int              // Config.TextWalk
}

// Open connects a pool. It does not wait for the database to be reachable:
// dlq starts while PostgreSQL is down and reports it through Ping.
func Open(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	pcfg, err := pgxpool.ParseConfig(cfg.DatabaseURL)
	if err != nil {
		return nil, fmt.Errorf("store: parse database URL: %w", err)
	}
	pcfg.MaxConns = cmp.Or(cfg.MaxConns, maxConnsDefault)
	if cfg.Tracer != nil {
		pcfg.ConnConfig.Tracer = cfg.Tracer
	}
	pcfg.ConnConfig.ConnectTimeout = cmp.Or(pcfg.ConnConfig.ConnectTimeout, 5*time.Second)
	pcfg.ConnConfig.DescriptionCacheCapacity = max(pcfg.ConnConfig.DescriptionCacheCapacity, descriptionCacheMin)
	// A connection that sat through a PostgreSQL restart is dead; check
	// before handing it out rather than failing the first query after.
	pcfg.HealthCheckPeriod = 5 * time.Second
	pool, err := pgxpool.NewWithConfig(ctx, pcfg)
	if err != nil {
		return nil, fmt.Errorf("store: create pool for %s: %w", redact.URL(cfg.DatabaseURL), err)
	}
	st := &Store{pool: pool, log: cmp.Or(cfg.Logger, slog.Default()), up: cfg.Up, text: cfg.TextSearch, textWalk: cmp.Or(cfg.TextWalk, TextWalkDefault)}
	if e := cfg.Encryption; e != nil {
		st.enc = &encState{ring: e.Ring, sealHeader: e.SealHeader}
	}
	return st, nil
}

// Ping checks that PostgreSQL answers.
func (s *Store) Ping(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	if err := s.pool.Ping(ctx); err != nil {
		return fmt.Errorf("store: ping: %w", err)
	}
	return nil
}

// Close closes the pool, waiting for borrowed connections to come back.
func (s *Store) Close() { s.pool.Close() }
