package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/store"
)

func cmdMigrate(args []string) int {
	var backfill, status bool
	cfg, log, _, code := cli.LoadConfig("migrate", args, func(fs *flag.FlagSet) {
		fs.BoolVar(&status, "status", false, "print the migrations applied and pending, the one being applied now and the backfills' progress, and change nothing (exit 0: up to date and nothing running; 6: something still to do or under way)")
		fs.BoolVar(&backfill, "backfill-text", false, "then queue every plain message without a text document for the indexer of dlq serve, so that text search finds their words (docs/OPERATIONS.md); resumable, safe beside dlq serve")
	})
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
	if status {
		return cli.MigrateStatus(ctx, os.Stdout, st, time.Now())
	}
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
	if backfill {
		if !cfg.Ingest.TextSearch {
			// Older rows in the index while new ones stay out would make
			// q find some messages' words and not others'.
			fmt.Fprintln(os.Stderr, "dlq migrate: -backfill-text needs text search on (ingest.text_search, DLQ_SEARCH_TEXT=true): turn it on for dlq serve and here, then run this again")
			return cli.ExitUsage
		}
		return backfillText(ctx, st)
	}
	return cli.ExitOK
}

// backfillText runs store.BackfillText over every id, newest first: every
// plain row without a text document is queued for the indexer (dlq serve
// writes the documents), and says how far it got.
func backfillText(ctx context.Context, st *store.Store) int {
	const batch = 5000
	start := time.Now()
	var before int64
	total := 0
	for {
		next, n, err := st.BackfillText(ctx, before, batch)
		if err != nil {
			fmt.Fprintf(os.Stderr, "dlq migrate: %v (rerun dlq migrate -backfill-text to go on)\n", err)
			return cli.ExitUnavailable
		}
		total += n
		if next == 0 {
			fmt.Printf("text backfill done: %d messages queued for the text index in %s (dlq serve indexes them)\n", total, time.Since(start).Round(time.Second))
			return cli.ExitOK
		}
		if before/100_000 != next/100_000 {
			fmt.Printf("text backfill: below id %d, %d messages queued so far\n", next, total)
		}
		before = next
	}
}
