package main

import (
	"cmp"
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/alerts"
	"github.com/dlq/dlq/category"
	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/config"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// newCron builds the cron service (summary, cleanup, capacity and alert
// jobs) from the configuration. Every instance builds it; the jobs' leases
// decide which instance runs each tick. ingest is this process's consumer,
// which the expiry of ingest_inflight rows asks about its own consumers.
func newCron(cfg config.Config, st *store.Store, ingest cleanup.Ingest, categories *category.Rules, log *slog.Logger, reg prometheus.Registerer) (*cron.Service, error) {
	notifiers, err := cfg.Alerts.Notifiers(alerts.NotifierDeps{
		EvalInterval: cron.ScheduleInterval(cfg.Cron.Alerts),
	})
	if err != nil {
		return nil, err
	}
	retention := make(map[string]time.Duration, len(cfg.Cleanup.Retention))
	for status, d := range cfg.Cleanup.Retention {
		retention[status] = d.D()
	}
	return cron.New(cron.Config{
		Store:      st,
		Logger:     log,
		Registerer: reg,
		Instance:   cfg.Cron.Instance,
		LeaseTTL:   cfg.Cron.LeaseTTL.D(),
		Disabled:   cfg.Cron.Disabled,
		Schedules: cron.Schedules{
			Summary:    cfg.Cron.Summary,
			Cleanup:    cfg.Cron.Cleanup,
			Capacity:   cfg.Cron.Capacity,
			Alerts:     cfg.Cron.Alerts,
			Categories: cfg.Cron.Categories,
			Policies:   cfg.Cron.Policies,
			Backfills:  cfg.Cron.Backfills,
			Statistics: cfg.Cron.Statistics,
		},
		Categories: cron.CategoriesConfig{Rules: categories},
		Backfills:  cron.BackfillsConfig{Rules: categories},
		Policies:   cron.PoliciesConfig{Policies: policies(cfg.Recovery.Policies, cfg.Replay)},
		Summary:    cron.SummaryConfig{ReconcileInterval: cfg.Cron.ReconcileInterval.D()},
		Cleanup: cleanup.Config{
			Retention:    retention,
			BatchSize:    cfg.Cleanup.BatchSize,
			BatchTimeout: cfg.Cleanup.BatchTimeout.D(),
			Pause:        cfg.Cleanup.Pause.D(),
			Capacity: cleanup.Capacity{
				MaxMessages:       cfg.Cleanup.MaxMessages,
				MaxBytes:          cfg.Cleanup.MaxBytes,
				AllowEvictPending: cfg.Cleanup.AllowEvictPending,
			},
			ControlCommandTTL: cleanup.ConfiguredTTL(cfg.Cleanup.ControlCommandTTL.D()),
			ReplayTaskTTL:     cleanup.ConfiguredTTL(cfg.Cleanup.ReplayTaskTTL.D()),
			JobRunTTL:         cleanup.ConfiguredTTL(cfg.Cleanup.JobRunTTL.D()),
			AuditTTL:          cleanup.ConfiguredTTL(cfg.Cleanup.AuditTTL.D()),
			IngestInflightTTL: cleanup.ConfiguredTTL(cfg.Cleanup.IngestInflightTTL.D()),
			Ingest:            ingest,
		},
		Alerts: cron.AlertsConfig{Rules: cfg.Alerts.RuleSet(), Notifiers: notifiers},
	})
}

// policies turns the configured policies, with their defaults, into the
// cron job's: each attempt's task sends a publish whose outcome is unknown
// again as replay's settings say, unless the policy says otherwise.
func policies(in []config.Policy, r config.Replay) []cron.Policy {
	out := make([]cron.Policy, 0, len(in))
	for _, p := range in {
		p = p.WithDefaults()
		cp := cron.Policy{
			Name: p.Name, Queues: p.Queues, Categories: p.Categories, Reasons: p.Reasons, Groups: p.Groups,
			FirstDelay: p.FirstDelay.D(), BackoffFactor: p.BackoffFactor, MaxDelay: p.MaxDelay.D(), Jitter: p.Jitter,
			MaxAttempts: p.MaxAttempts, RatePerSecond: p.RatePerSecond, DryRun: p.DryRun,
		}
		if cmp.Or(p.OnUnknown, r.OnUnknown) == replay.OnUnknownRetry {
			cp.UnknownRetries = r.UnknownRetries
		}
		if p.Canary != nil {
			cp.Canary = &cron.PolicyCanary{Count: p.Canary.Count, WaitSeconds: p.Canary.WaitSeconds}
		}
		out = append(out, cp)
	}
	return out
}

// stopCron is shutdown step 3: no new ticks; runs in progress stop at their
// next statement (what they committed stays) and record their end.
func stopCron(c *cron.Service, log *slog.Logger) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()
	if err := c.Stop(ctx); err != nil {
		log.Warn("cron jobs did not stop in time", "error", err)
	}
}
