package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlq/dlq/cleanup"
	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/store"
)

func main() {
	dsn := flag.String("dsn", "", "database URL")
	instance := flag.String("instance", "", "holder name")
	every := flag.String("every", "@every 200ms", "cleanup schedule")
	ttl := flag.Duration("ttl", time.Second, "lease TTL")
	batch := flag.Int("batch", 5, "rows per batch")
	pause := flag.Duration("pause", 150*time.Millisecond, "pause between batches")
	flag.Parse()

	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	st, err := store.Open(ctx, store.Config{DatabaseURL: *dsn, MaxConns: 4, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	defer st.Close()
	svc, err := cron.New(cron.Config{
		Store: st, Logger: log, Instance: *instance, LeaseTTL: *ttl,
		Schedules: cron.Only(cron.Schedules{Cleanup: *every}),
		Cleanup: cleanup.Config{
			Retention: map[string]time.Duration{store.StatusReplayed: time.Hour},
			BatchSize: *batch, Pause: *pause,
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	svc.Start()
	fmt.Println("ready")
	<-ctx.Done()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_ = svc.Stop(sctx)
}
