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

// replayConns is how many database connections replay and the control
// queue may hold at once: per running task a claimer, a settler and a
// lease renewal; one notification listener; one per control consumer; and
// the runner loop's and claim recovery's short queries.
func replayConns(cfg config.Config) int {
	return 3*cfg.Replay.MaxTasks + 1 + cfg.Replay.ControlConsumers + 2
}
