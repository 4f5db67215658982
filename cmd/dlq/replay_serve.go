package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// newReplay builds the replay service for serve.
func newReplay(cfg config.Config, st *store.Store, conn *broker.Conn, ring *crypt.Ring, log *slog.Logger, reg prometheus.Registerer) (*replay.Service, error) {
	r := cfg.Replay
	return replay.New(replay.Config{
		Store:           st,
		Conn:            conn,
		MaxReplays:      r.MaxReplays,
		Lease:           r.Lease.D(),
		BatchSize:       r.BatchSize,
		Window:          r.Window,
		MaxTasks:        r.MaxTasks,
		MaxTaskMessages: r.MaxTaskMessages,
		PollInterval:    r.PollInterval.D(),
		ConfirmTimeout:  r.ConfirmTimeout.D(),
		KeepUserID:      r.KeepUserID,
		OnUnknown:       r.OnUnknown,
		UnknownRetries:  r.UnknownRetries,
		Ring:            ring,
		Logger:          log,
		Registerer:      reg,
	})
}

// newControl builds the control-queue handler. It shares the HTTP API's
// authenticator and operations layer, so a token means the same on both;
// with no token configured it refuses every command (the broker is
// reachable by more than loopback clients).
func newControl(cfg config.Config, st *store.Store, conn *broker.Conn, o *ops.Service, authn *auth.Authenticator, log *slog.Logger, reg prometheus.Registerer) (*control.Control, error) {
	c, err := control.New(control.Config{
		Conn:       conn,
		Queue:      cfg.ControlQueue,
		Ops:        o,
		Commands:   st,
		Auth:       authn,
		Consumers:  cfg.Replay.ControlConsumers,
		MaxBytes:   cfg.Replay.ControlMaxBytes,
		Logger:     log,
		Registerer: reg,
	})
	if err != nil {
		return nil, err
	}
	if authn.Open() {
		log.Warn("no token is configured: the control queue refuses every command (set DLQ_ADMIN_TOKEN or api.tokens)",
			"control_queue", cfg.ControlQueue)
	}
	return c, nil
}

// replayConns is replay's and the control queue's share of serve's
// database pool: three per task replay.max_tasks allows, one per control
// consumer, and three for the runner loop, claim recovery and the
// notification listener (which then takes its connection out of the
// pool). A task at its peak has more statements in flight than its three
// (up to three claims, a read of its next items, three settlements, a
// lease renewal and two write-ahead marks), but none of them holds a
// connection while waiting for another, so when the pool is short they
// take turns with each other and with ingest and the API; nothing can
// deadlock (TestReplayCompletesWithTheSmallestPool runs a task, ingest and
// the control queue on a single connection). A share sized for the peak
// would be ten connections per task on every instance, out of
// PostgreSQL's 100 by default.
func replayConns(cfg config.Config) int {
	return 3*cfg.Replay.MaxTasks + 1 + cfg.Replay.ControlConsumers + 2
}
