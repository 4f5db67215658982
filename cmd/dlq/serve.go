package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/console"
	"github.com/dlq/dlq/consumer"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/gctune"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
	"github.com/dlq/dlq/textindex"
)

func cmdServe(args []string) int {
	cfg, log, _, code := cli.LoadConfig("serve", args, nil)
	if code >= 0 {
		return code
	}
	gctune.Apply(log)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := serve(ctx, cfg, log); err != nil {
		var ce *configError
		if errors.As(err, &ce) {
			log.Error("dlq serve: wrong configuration; nothing was started", "error", err)
			return cli.ExitUsage
		}
		log.Error("dlq serve stopped", "error", err)
		return cli.ExitFailure
	}
	return cli.ExitOK
}

// configError is a wrong configuration value or file that serve finds
// before it starts anything: exit code 2, as for a value config.Load
// refuses. Every other failure of serve is one at run time (exit 1).
type configError struct{ err error }

func (e *configError) Error() string { return e.err.Error() }
func (e *configError) Unwrap() error { return e.err }

// settings are what serve reads from the configuration's values and files
// (keys, certificates, rules, tokens) before it connects anywhere.
type settings struct {
	ring       *crypt.Ring
	sealing    *store.Encryption
	amqpTLS    *tls.Config
	httpTLS    *tls.Config
	categories *category.Rules
	authn      *auth.Authenticator
}

// readSettings reads them; its error is a configError.
func readSettings(ctx context.Context, cfg config.Config, log *slog.Logger) (settings, error) {
	var (
		s   settings
		err error
	)
	if s.ring, s.sealing, err = encryption(cfg); err != nil {
		return settings{}, &configError{err}
	}
	if s.amqpTLS, err = cfg.AMQPClientTLS(); err != nil {
		return settings{}, &configError{err}
	}
	if s.categories, err = cfg.CategoryRules(); err != nil {
		return settings{}, &configError{err}
	}
	// The operations layer compiles them only once ingest runs.
	for _, p := range cfg.Redaction.BodyPaths {
		if err := ops.CheckBodyPath(p); err != nil {
			return settings{}, &configError{fmt.Errorf("config: redaction.body_paths / DLQ_REDACT_BODY_PATHS: %w", err)}
		}
	}
	// One authenticator for the HTTP API and the control queue, so a token
	// means the same on both.
	if s.authn, err = auth.New(cfg.AuthConfig()); err != nil {
		return settings{}, &configError{err}
	}
	// Last: its certificate is watched until ctx ends.
	if s.httpTLS, err = serverTLS(ctx, cfg, log); err != nil {
		return settings{}, &configError{err}
	}
	return s, nil
}

// serve wires the components together and runs them until ctx ends.
//
// Start-up reads the configuration's keys, certificates, rules and tokens
// first (readSettings): a wrong one stops it before it connects anywhere.
// Then it puts ingest first, because dead letters are the one thing that
// cannot wait while dlq restarts (each step of a rolling upgrade is one):
// PostgreSQL's checks and RabbitMQ's topology go at once, the consumers
// subscribe as soon as both are done, and the rest (replay, cron, the
// control queue, HTTP and the console) is built while they already ingest.
//
// Shutdown order, each step finishing before the next:
//  1. stop consuming: consumers cancel their subscriptions, commit and
//     acknowledge what they already received, and keep their channels open
//     until RabbitMQ shows the acknowledgements applied (a channel that
//     closes sooner can drop them: package consumer, "Shutdown");
//  2. finish replays: publishes in flight get their confirms;
//  3. stop cron jobs and the text indexer (a batch in flight rolls back:
//     its rows stay queued for the next start);
//  4. stop HTTP (readiness fails from step 1 on, so load balancers move away);
//  5. close the AMQP connections, replay's and ingest's (after every ack
//     and publish above);
//  6. close the PostgreSQL pool last: every step above may still write.
//
// A start-up that fails after ingest began takes step 1 before 5 and 6.
func serve(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "dlq_up",
		Help: "1 when the component works, 0 when it does not (amqp: connection; postgres: database writes; consumer: subscribed and writing).",
	}, []string{"component"})
	reg.MustRegister(up)

	s, err := readSettings(ctx, cfg, log)
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, store.Config{DatabaseURL: cfg.DatabaseURL, MaxConns: int32(4 + 2*cfg.Ingest.Consumers*len(cfg.Queues) + replayConns(cfg)),
		Logger: log, Registerer: reg, Up: up.WithLabelValues("postgres"), Encryption: s.sealing, TextSearch: cfg.Ingest.TextSearch})
	if err != nil {
		return err
	}
	defer st.Close() // 6.
	conn, err := broker.NewConn(broker.ConnConfig{URL: cfg.AMQPURL, Logger: log, Up: up.WithLabelValues("amqp"), TLS: s.amqpTLS})
	if err != nil {
		return err
	}
	defer conn.Close() // 5.
	// Replay publishes on a connection of its own. During a memory or disk
	// alarm RabbitMQ stops reading every connection that publishes; on a
	// shared one, a replay's publish also stopped ingest's acknowledgements,
	// and with them the one thing that drains dlq's queue while the alarm
	// lasts.
	replayConn, err := broker.NewConn(broker.ConnConfig{URL: cfg.AMQPURL, Name: "dlq-replay", Logger: log, TLS: s.amqpTLS})
	if err != nil {
		return err
	}
	defer replayConn.Close() // 5.

	declared := make(chan error, 1)
	go func() { declared <- startBrokerWatch(ctx, cfg, conn, log, reg) }()
	dbErr := prepareDatabase(ctx, cfg, st, s.ring, s.categories, log)
	if err := errors.Join(dbErr, <-declared); err != nil {
		return err
	}
	p := parts{up: up}
	if p.consumer, err = newConsumer(cfg, st, conn, s.categories, log, reg, up.WithLabelValues("consumer")); err != nil {
		return err
	}
	ingestCtx, cancelIngest := context.WithCancel(ctx)
	defer cancelIngest()
	consumeDone := make(chan error, 1)
	go func() { consumeDone <- p.consumer.Run(ingestCtx) }()
	p.haltIngest = func() error {
		cancelIngest()
		return <-consumeDone
	}

	if err := p.build(cfg, st, conn, replayConn, s, log, reg); err != nil {
		p.stopIngest(log)
		return err
	}
	go func() { _ = st.Watch(ctx) }()
	return p.run(ctx, cfg, log)
}

// prepareDatabase migrates the schema (unless told not to), checks that
// the configured encryption keys open what the database holds and, on a
// store that has never held a message, records that the cron jobs' first
// passes have nothing to count (store.SettleEmptyStore): before ingest
// starts, since a backlog's first rows would otherwise be theirs to walk.
func prepareDatabase(ctx context.Context, cfg config.Config, st *store.Store, ring *crypt.Ring, categories *category.Rules, log *slog.Logger) error {
	if !cfg.NoMigrate {
		if _, err := st.MigrateWhenReachable(ctx); err != nil {
			return err
		}
	}
	if err := checkKeys(ctx, cfg, st, ring, log); err != nil {
		return err
	}
	hash := ""
	if categories != nil {
		hash = categories.Hash()
	}
	// Only a saving: a schema not migrated yet (--no-migrate) or a
	// failed read leaves the first passes to run as they would.
	settled, err := st.SettleEmptyStore(ctx, hash)
	switch {
	case err != nil:
		log.Warn("could not check whether the store is empty; the summary and category jobs will recount it", "err", err)
	case settled.Summary || settled.Categories:
		log.Info("empty store: the summary and category jobs start with nothing to recount",
			"summary", settled.Summary, "categories", settled.Categories)
	}
	return nil
}

// build makes every part but ingest, which already runs.
func (p *parts) build(cfg config.Config, st *store.Store, conn, replayConn *broker.Conn, s settings, log *slog.Logger, reg *prometheus.Registry) error {
	authn, ring := s.authn, s.ring
	var err error
	if p.cron, err = newCron(cfg, st, p.consumer, s.categories, log, reg); err != nil {
		return err
	}
	if p.replays, err = newReplay(cfg, st, replayConn, ring, log, reg); err != nil {
		return err
	}
	// The text indexer writes q's word documents off the ingest path
	// (package textindex); with text search off nothing is queued for it.
	if cfg.Ingest.TextSearch {
		if p.indexer, err = textindex.New(textindex.Config{Store: st, Duty: cfg.Ingest.TextIndexDuty, Logger: log, Registerer: reg}); err != nil {
			return err
		}
	}
	// The operations layer: every rule of every front door, once.
	operations, err := ops.New(ops.Config{Store: st, Replays: p.replays, Cron: p.cron, ConfirmAbove: cfg.API.ConfirmAbove,
		ApprovalAbove: cfg.API.ApprovalAbove, ApprovalTTL: cfg.API.ApprovalTTL.D(), Principals: authn.Principals,
		EditLockedHeaders: cfg.Replay.EditLockedHeaders, EditSensitiveHeaders: cfg.Replay.EditSensitiveHeaders,
		KeepUserID: cfg.Replay.KeepUserID, Ring: ring,
		Redaction: ops.Redaction{Headers: cfg.Redaction.Headers, BodyPaths: cfg.Redaction.BodyPaths, RevealRole: cfg.Redaction.RevealRole},
		Logger:    log})
	if err != nil {
		return err
	}
	if p.control, err = newControl(cfg, st, conn, operations, authn, log, reg); err != nil {
		return err
	}
	p.http, err = newHTTP(cfg, httpDeps{ops: operations, authn: authn, st: st, conn: conn, cons: p.consumer, tls: s.httpTLS}, log, reg)
	return err
}

// startBrokerWatch starts what watches and declares RabbitMQ's side: the
// management API's policy check (when configured) and the declarer of
// dlq's topology, and waits for the declarer's first attempt, so that
// consumers subscribe to declared queues. Both retry in the background
// until ctx ends and need no place in the shutdown order: they only read
// or declare.
func startBrokerWatch(ctx context.Context, cfg config.Config, conn *broker.Conn, log *slog.Logger, reg prometheus.Registerer) error {
	if cfg.Management.URL != "" {
		base, user, password, vhost := cfg.ManagementCredentials()
		pc, err := broker.NewPolicyCheck(broker.PolicyCheckConfig{
			URL: base, User: user, Password: password, Vhost: vhost,
			Queues: cfg.Queues, Interval: cfg.Management.Interval.D(),
			Logger: log, Registerer: reg,
		})
		if err != nil {
			return err
		}
		go func() { _ = pc.Run(ctx) }()
	}
	declarer, err := broker.NewDeclarer(broker.DeclarerConfig{Conn: conn, Topology: cfg.BrokerTopology(),
		Sources: cfg.Topology.DeclareSources, Logger: log})
	if err != nil {
		return err
	}
	go func() { _ = declarer.Run(ctx) }()
	select {
	case <-declarer.Tried():
	case <-time.After(15 * time.Second):
	case <-ctx.Done():
	}
	return nil
}

// newConsumer builds ingest for serve.
func newConsumer(cfg config.Config, st *store.Store, conn *broker.Conn, categories *category.Rules, log *slog.Logger, reg prometheus.Registerer, up prometheus.Gauge) (*consumer.Consumer, error) {
	return consumer.New(consumer.Config{
		Conn:       conn,
		Store:      st,
		Exchange:   cfg.Exchange,
		Queues:     cfg.Queues,
		Consumers:  cfg.Ingest.Consumers,
		Prefetch:   cfg.Ingest.Prefetch,
		BatchSize:  cfg.Ingest.BatchSize,
		BatchBytes: cfg.Ingest.BatchBytes,
		Linger:     cfg.Ingest.Linger.D(),
		Logger:     log,
		Registerer: reg,
		Up:         up,
		Categories: categories,
	})
}

// httpDeps is what the HTTP server serves and checks.
type httpDeps struct {
	ops   *ops.Service
	authn *auth.Authenticator
	st    *store.Store
	conn  *broker.Conn
	cons  *consumer.Consumer
	tls   *tls.Config // nil: plain HTTP
}

// newHTTP builds the HTTP server: the API, the metrics, the health checks
// and the web console beside them on one port (DLQ_UI=false: no console).
func newHTTP(cfg config.Config, d httpDeps, log *slog.Logger, reg *prometheus.Registry) (*api.Server, error) {
	mount := map[string]http.Handler{}
	if cfg.UI.Enabled {
		ui, err := console.New(console.Config{Ops: d.ops, Auth: d.authn, Sessions: d.st, SessionTTL: cfg.UI.SessionTTL.D(),
			RequestID: api.RequestID, Logger: log, Registerer: reg})
		if err != nil {
			return nil, err
		}
		mount[console.Path] = ui
	}
	return api.New(api.Config{
		TLS:          d.tls,
		Addr:         cfg.HTTPAddr,
		Mount:        mount,
		Gatherer:     reg,
		Registerer:   reg,
		Logger:       log,
		Ops:          d.ops,
		Auth:         d.authn,
		MaxBodyBytes: cfg.API.MaxBodyBytes,
		Checks: []api.Check{
			// The detail says when a failover could lose acknowledged dead
			// letters (docs/OPERATIONS.md, "PostgreSQL failover").
			{Name: "postgres", Check: d.st.Ping, Detail: d.st.ReplicationDetail},
			{Name: "rabbitmq", Check: func(context.Context) error {
				if ok, err := d.conn.Connected(); !ok {
					return err
				}
				return nil
			}},
			{Name: "ingest", Check: func(context.Context) error { return d.cons.Ready() }},
		},
	})
}

// parts are the components serve runs and stops in its written order;
// the store and the AMQP connection close after them (steps 5 and 6).
type parts struct {
	up       *prometheus.GaugeVec
	consumer *consumer.Consumer
	// haltIngest ends the consumer, which runs from before the other
	// parts are built, and waits for it (step 1; once only).
	haltIngest func() error
	control    *control.Control
	replays    *replay.Service
	cron       *cron.Service
	indexer    *textindex.Indexer // nil: text search off
	http       *api.Server
}

// stopIngest is step 1 of the shutdown order: the consumers settle what
// they hold and stop.
func (p parts) stopIngest(log *slog.Logger) {
	if err := p.haltIngest(); err != nil {
		log.Error("consumer stopped with an error", "error", err)
	}
}

// run starts every part and, once ctx ends (or HTTP fails), stops them in
// serve's order, steps 1 to 4.
func (p parts) run(ctx context.Context, cfg config.Config, log *slog.Logger) error {
	ln, err := p.http.Listen()
	if err != nil {
		p.stopIngest(log)
		return err
	}
	httpDone := make(chan error, 1)
	go func() { httpDone <- p.http.Serve(ln) }()
	controlDone := make(chan error, 1)
	go func() { controlDone <- p.control.Run(ctx) }()
	replayDone := make(chan error, 1)
	go func() { replayDone <- p.replays.Run(ctx) }()
	indexDone := make(chan error, 1)
	if p.indexer != nil {
		go func() { indexDone <- p.indexer.Run(ctx) }()
	} else {
		indexDone <- nil
	}
	p.cron.Start()
	log.Info("dlq serving", "queues", cfg.Queues, "exchange", cfg.Exchange, "http_addr", cfg.HTTPAddr)

	select {
	case <-ctx.Done():
	case err := <-httpDone:
		return err
	}
	log.Info("shutting down")
	// 1.
	p.stopIngest(log)
	p.up.WithLabelValues("consumer").Set(0)
	if err := <-controlDone; err != nil {
		log.Error("control queue stopped with an error", "error", err)
	}
	// 2.
	if err := <-replayDone; err != nil {
		log.Error("replay stopped with an error", "error", err)
	}
	// 3.
	stopCron(p.cron, log)
	if err := <-indexDone; err != nil {
		log.Error("text indexer stopped with an error", "error", err)
	}
	// 4.
	shCtx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.http.Shutdown(shCtx); err != nil {
		log.Warn("HTTP shutdown", "error", err)
	}
	log.Info("shutdown complete")
	return nil
}
