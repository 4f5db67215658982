package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/store"
)

func cmdMigrate(args []string) int {
	cfg, log, _, code := cli.LoadConfig("migrate", args, nil)
	if code >= 0 {
		return code
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	st, err := store.Open(ctx, store.Config{DatabaseURL: cfg.DatabaseURL, MaxConns: 2, Logger: log})
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq migrate: %v\n", err)
		return cli.ExitUsage
	}
	defer st.Close()
	res, err := st.Migrate(ctx, log)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq migrate: %v\n", err)
		return cli.ExitUnavailable
	}
	if len(res.Applied) == 0 {
		fmt.Printf("schema is up to date (version %d)\n", res.To)
	} else {
		fmt.Printf("applied %d migrations: version %d -> %d\n", len(res.Applied), res.From, res.To)
	}
	return cli.ExitOK
}
