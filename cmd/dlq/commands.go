package main

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/dlq/dlq/internal/cli"
)

type command struct {
	name    string
	summary string
	run     func(args []string) int
}

// commands lists every subcommand. Running dlq lives in this package
// (serve.go, migrate.go, topology.go); operating it is package cli.
func commands() []command {
	return []command{
		{"serve", "run dlq: ingest, replay, cron jobs and the HTTP API", cmdServe},
		{"migrate", "apply database migrations online and exit (--status: applied, pending, running, backfills)", cmdMigrate},
		{"rekey", "re-encrypt stored messages under the first encryption key, online (-status: what each key wraps)", cli.Rekey},
		{"topology", "declare the dead-letter exchange, queues and configured source queues", cmdTopology},
		{"replay", "replay messages by id or filter, at a rate, after a delay, with a canary", cli.Replay},
		{"replays", "list replay tasks, or show one", cli.Replays},
		{"cancel", "cancel a replay task", cli.Cancel},
		{"ls", "list dead messages (filters, search, pages) through the HTTP API", cli.Ls},
		{"show", "show one dead message with headers, death record and body", cli.Show},
		{"groups", "list failure groups, largest first", cli.Groups},
		{"stats", "overview: counts by status, queue, reason; oldest pending; top groups", cli.Stats},
		{"status", "per source queue counts", cli.Status},
		{"ack", "acknowledge messages by id or filter", cli.Ack},
		{"rm", "delete messages by id or filter", cli.Rm},
		{"export", "write every message a filter selects as JSON Lines (bodies, typed headers)", cli.Export},
		{"import", "store the messages of exports as pending (each once, however often imported)", cli.Import},
		{"audit", "who did what: the audit log, newest first (filters, pages)", cli.Audit},
		{"jobs", "cron jobs: schedule, lease, last success and recent runs", cli.Jobs},
		{"alerts", "alerts pending, firing or just resolved, and the rules", cli.Alerts},
		{"approvals", "requests for approval (four-eyes), newest first", cli.Approvals},
		{"approve", "approve a request: it runs on its snapshot (never your own)", cli.Approve},
		{"reject", "reject a request for approval; nothing runs", cli.Reject},
		{"edit-replay", "send a corrected copy of a message (new body, header changes); the original is kept", cli.EditReplay},
		{"policies", "automatic replay policies: selection, schedule, paused or not", cli.Policies},
		{"policy", "pause or resume an automatic replay policy", cli.Policy},
		{"version", "print the version", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dlq <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-10s %s\n", c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `dlq <command> -h` for a command's flags. Configuration comes from")
	fmt.Fprintln(w, "DLQ_* environment variables and an optional --config YAML file (see README).")
}

// version is set at build time with -ldflags "-X main.version=…" (the
// Makefile and the Dockerfile do). A plain `go build` leaves "dev", and
// versionString then adds the commit Go recorded, if any.
var version = "dev"

func versionString() string {
	if version != "dev" {
		return version
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return version
	}
	var rev, modified string
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			if s.Value == "true" {
				modified = "-dirty"
			}
		}
	}
	if rev == "" {
		return version
	}
	return fmt.Sprintf("dev (%.12s%s)", rev, modified)
}

func cmdVersion([]string) int {
	fmt.Println("dlq", versionString())
	return cli.ExitOK
}
