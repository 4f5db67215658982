package main

import (
	"fmt"
	"io"
	"os"
	"runtime"
	"runtime/debug"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/migrations"
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
		{"stats", "overview: counts by status, queue, reason and category; oldest pending; top groups", cli.Stats},
		{"status", "per source queue counts", cli.Status},
		{"ack", "acknowledge messages by id or filter", cli.Ack},
		{"rm", "delete messages by id or filter", cli.Rm},
		{"export", "write every message a filter selects as JSON Lines (bodies, typed headers)", cli.Export},
		{"import", "store the messages of exports as pending (each once, however often imported)", cli.Import},
		{"audit", "who did what: the audit log, newest first (filters, pages)", cli.Audit},
		{"jobs", "cron jobs: schedule, lease, last success and recent runs", cli.Jobs},
		{"alerts", "alerts pending, firing or just resolved, and the rules", cli.Alerts},
		{"approvals", "requests for approval (four-eyes), newest first; approvals ID: one in full", cli.Approvals},
		{"approve", "approve a request: it runs on its snapshot (never your own)", cli.Approve},
		{"reject", "reject a request for approval; nothing runs", cli.Reject},
		{"withdraw", "take back your own request for approval; nothing runs", cli.Withdraw},
		{"edit-replay", "send a corrected copy of a message (new body, header changes); the original is kept", cli.EditReplay},
		{"policies", "automatic replay policies: selection, schedule, paused or not", cli.Policies},
		{"policy", "pause or resume an automatic replay policy", cli.Policy},
		{"version", "print the release, the commit and the schema version this build expects", cmdVersion},
	}
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "usage: dlq <command> [flags]")
	fmt.Fprintln(w)
	fmt.Fprintln(w, "commands:")
	width := 0
	for _, c := range commands() {
		width = max(width, len(c.name))
	}
	for _, c := range commands() {
		fmt.Fprintf(w, "  %-*s  %s\n", width, c.name, c.summary)
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "Run `dlq <command> -h` for a command's flags. Configuration comes from")
	fmt.Fprintln(w, "DLQ_* environment variables and an optional --config YAML file (see README).")
}

// version and commit are stamped at build time with -ldflags "-X
// main.version=… -X main.commit=…": the Makefile reads the release from the
// file VERSION at the root (its one place), the Dockerfile too. A plain
// `go build` leaves "dev", and the commit comes from what Go recorded.
var (
	version = "dev"
	commit  = ""
)

// buildCommit is the commit the binary was built from: the stamped one,
// else the revision Go recorded (with -dirty for local changes), else "".
func buildCommit() string {
	if commit != "" {
		return commit
	}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return ""
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
		return ""
	}
	return fmt.Sprintf("%.12s%s", rev, modified)
}

// cmdVersion prints the release, then what an operator checks before a
// rolling upgrade: the schema version this build migrates to (docs/UPGRADING.md).
func cmdVersion([]string) int {
	line := "dlq " + version
	if c := buildCommit(); c != "" {
		line += " (commit " + c + ")"
	}
	fmt.Println(line)
	v, name, err := migrations.Latest()
	if err != nil {
		fmt.Fprintf(os.Stderr, "dlq version: %v\n", err)
		return cli.ExitUnavailable
	}
	fmt.Printf("schema %d (%s)\n", v, name)
	fmt.Printf("go %s %s/%s\n", runtime.Version(), runtime.GOOS, runtime.GOARCH)
	return cli.ExitOK
}
