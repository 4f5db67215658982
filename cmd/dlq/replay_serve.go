package main

import (
	"log/slog"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// newReplay builds the replay service and the control-queue handler for
// serve. The control queue shares the HTTP API's authenticator, so a token
// means the same on both; with no token configured it refuses every
// command (the broker is reachable by more than loopback clients).
func newReplay(cfg config.Config, st *store.Store, conn *broker.Conn, authn *auth.Authenticator, log *slog.Logger, reg prometheus.Registerer) (*replay.Service, *replay.Control, error) {
	r := cfg.Replay
	replays, err := replay.New(replay.Config{
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
		Logger:          log,
		Registerer:      reg,
	})
	if err != nil {
		return nil, nil, err
	}
	control, err := replay.NewControl(replay.ControlConfig{
		Conn:         conn,
		Queue:        cfg.ControlQueue,
		Replays:      replays,
		Actions:      st,
		Commands:     st,
		Auth:         authn,
		Consumers:    r.ControlConsumers,
		MaxBytes:     r.ControlMaxBytes,
		ConfirmAbove: cfg.API.ConfirmAbove,
		Logger:       log,
		Registerer:   reg,
	})
	if err != nil {
		return nil, nil, err
	}
	if authn.Open() {
		log.Warn("no token is configured: the control queue refuses every command (set DLQ_ADMIN_TOKEN or api.tokens)",
			"control_queue", cfg.ControlQueue)
	}
	return replays, control, nil
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
