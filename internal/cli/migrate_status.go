package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// MigrateStatus prints `dlq migrate --status`: every migration of this
// dlq with when the schema got it (or pending), migrations the schema has
// from a newer dlq, the migration being applied now and how far its index
// build is, and the backfills with their progress. It changes nothing and
// waits for no migration. It returns ExitOK when the schema has every
// migration and nothing is running (no migration, no backfill pass),
// ExitPending when something is still to do or under way, and
// ExitUnavailable when PostgreSQL cannot be read.
func MigrateStatus(ctx context.Context, w io.Writer, st *store.Store, now time.Time) int {
	s, err := st.MigrationsStatus(ctx)
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq migrate: %v\n", err)
		return ExitUnavailable
	}
	printMigrationsStatus(w, s, now)
	if len(s.Pending()) > 0 || s.Migrating != nil {
		return ExitPending
	}
	for _, b := range s.Backfills {
		// Rows no pass has started on count too: done means every row
		// has what the migrations left to the backfill.
		if b.Left() {
			return ExitPending
		}
	}
	return ExitOK
}

func printMigrationsStatus(w io.Writer, s store.MigrationsStatus, now time.Time) {
	pending := s.Pending()
	fmt.Fprintf(w, "schema %s: %d of %d migrations applied", s.Schema, len(s.Migrations)-len(pending), len(s.Migrations))
	if len(pending) > 0 {
		fmt.Fprintf(w, ", %d pending", len(pending))
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "MIGRATION\tAPPLIED")
	// A new schema gets the migrations up to the baseline on empty
	// tables: offline only for an existing older one.
	existing := len(pending) < len(s.Migrations)
	offline := false
	for _, m := range s.Migrations {
		at := "pending"
		if m.AppliedAt != nil {
			at = timefmt.Human(*m.AppliedAt)
		} else if m.Offline && existing {
			at, offline = "pending (offline: see below)", true
		}
		fmt.Fprintf(tw, "%s\t%s\n", m.Name, at)
	}
	for _, m := range s.Newer {
		fmt.Fprintf(tw, "%05d (unknown here)\t%s by a newer dlq\n", m.Version, timefmt.Human(*m.AppliedAt))
	}
	_ = tw.Flush()
	if offline {
		fmt.Fprintf(w, "\nThe schema is older than %05d, the last migration before migrations ran online: the pending ones up to it\n"+
			"rewrite and index whole tables while ingest waits. Stop every dlq serve and run dlq migrate (docs/UPGRADING.md,\n"+
			"\"Older databases\").\n", store.MigrationBaseline)
	}
	if len(s.Newer) > 0 {
		fmt.Fprintln(w, "\nA newer dlq migrated this schema. This dlq runs on it (a rolling upgrade, or a roll back: docs/UPGRADING.md).")
	}

	fmt.Fprintln(w)
	if m := s.Migrating; m != nil {
		fmt.Fprintf(w, "migrating now: session %d, since %s (%s)", m.PID, timefmt.Human(m.Since), now.Sub(m.Since).Round(time.Second))
		switch {
		case m.Waiting == "Lock/virtualxid" || m.Waiting == "Lock/transactionid":
			fmt.Fprint(w, ", waiting for older transactions to end")
		case strings.HasPrefix(m.Waiting, "Lock/"):
			fmt.Fprintf(w, ", waiting for a lock (%s)", m.Waiting)
		}
		fmt.Fprintln(w)
		if q := strings.Join(strings.Fields(m.Query), " "); q != "" {
			fmt.Fprintf(w, "  %s\n", q)
		}
		if b := m.IndexBuild; b != nil {
			fmt.Fprintf(w, "  %s %s on %s: %s%s\n", strings.ToLower(b.Command), b.Index, b.Table, b.Phase, buildProgress(*b))
		}
	} else {
		fmt.Fprintln(w, "migrating now: nothing")
	}

	fmt.Fprintln(w)
	printBackfills(w, s.Backfills)
}

// printBackfills is the table of the backfills: running, waiting for the
// next pass, or idle, and when each last finished.
func printBackfills(w io.Writer, backfills []store.BackfillState) {
	if backfills == nil {
		fmt.Fprintln(w, "backfills: none yet (the schema predates them)")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "BACKFILL\tSTATE\tDONE\tOF\tRATE\tETA\tLAST FINISHED")
	for _, b := range backfills {
		state, done, of, rate, eta := "idle", "-", "-", "-", "-"
		if b.Waiting > 0 {
			state = thousands(b.Waiting) + " rows waiting for the next pass (cron job backfills)"
		}
		if b.Running() {
			state = "running since " + timefmt.Human(*b.StartedAt)
			done, of = thousands(b.Done), thousands(b.Total)
			if r := b.Rate(); r > 0 {
				rate = thousands(int64(r)) + "/s"
				eta = b.ETA().Round(time.Second).String()
			}
		}
		finished := "never"
		if b.FinishedAt != nil {
			finished = timefmt.Human(*b.FinishedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", b.Name, state, done, of, rate, eta, finished)
	}
	_ = tw.Flush()
}

// buildProgress words how far an index build's phase is.
func buildProgress(b store.IndexBuild) string {
	switch {
	case b.BlocksTotal > 0:
		return fmt.Sprintf(", %d%% (blocks %s of %s)", b.BlocksDone*100/b.BlocksTotal, thousands(b.BlocksDone), thousands(b.BlocksTotal))
	case b.TuplesTotal > 0:
		return fmt.Sprintf(", %d%% (rows %s of %s)", b.TuplesDone*100/b.TuplesTotal, thousands(b.TuplesDone), thousands(b.TuplesTotal))
	case b.LockersTotal > 0:
		return fmt.Sprintf(" (%d of %d transactions)", b.LockersDone, b.LockersTotal)
	}
	return ""
}
