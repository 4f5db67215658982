package cli

import (
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/timefmt"
)

// Jobs runs `dlq jobs`: the cron jobs, or one job's recent runs.
func Jobs(args []string) int { return runJobs(args, osEnv()) }

// runJobs prints every cron job with its schedule, the instance holding
// its lease, its last success and its last run; with a job's name, that
// job's recent runs.
func runJobs(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq jobs", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq jobs [flags] [job]   cron jobs: schedule, lease, last success and runs")
		fs.PrintDefaults()
	}
	pos, code := parseArgs(fs, args, env)
	if code >= 0 {
		return code
	}
	if len(pos) > 1 {
		fmt.Fprintf(env.stderr, "dlq jobs: give one job at most, not %d: %q\n", len(pos), pos)
		return ExitUsage
	}
	c := newAPIClient("jobs", af, env)
	if len(pos) == 1 {
		return showJob(c, af, pos[0])
	}
	v, code := answer[cron.JobsView](c, af.json, "GET", "/api/v1/jobs", nil, nil)
	if code >= 0 {
		return code
	}
	printJobs(env, v)
	return ExitOK
}

// showJob prints one job's recent runs; with --json, the job as the API
// answered it (one element of the listing, which is all the API has).
func showJob(c *apiClient, af apiFlags, name string) int {
	// The answer as it came, decoded here twice: as the view to find the
	// job, and as raw elements to print it unchanged with --json.
	b, code := answer[json.RawMessage](c, false, "GET", "/api/v1/jobs", nil, nil)
	if code >= 0 {
		return code
	}
	var v cron.JobsView
	var raw struct {
		Jobs []json.RawMessage `json:"jobs"`
	}
	if err := errors.Join(json.Unmarshal(b, &v), json.Unmarshal(b, &raw)); err != nil {
		return c.fail(fmt.Errorf("unexpected answer: %w", err))
	}
	for i, j := range v.Jobs {
		switch {
		case j.Name != name:
			continue
		case af.json:
			c.printRaw(raw.Jobs[i])
		default:
			printRuns(c.env, j)
		}
		return ExitOK
	}
	fmt.Fprintf(c.env.stderr, "dlq jobs: no job %q (dlq jobs lists them)\n", name)
	return ExitNotFound
}

// printJobs prints every job, one row each, with its last run.
func printJobs(env cliEnv, v cron.JobsView) {
	fmt.Fprintf(env.stdout, "answered by instance %s\n\n", v.Instance)
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSCHEDULE\tHOLDER\tLAST SUCCESS\tLAST RUN\tOUTCOME\tROWS\tERROR")
	for _, j := range v.Jobs {
		last, outcome, rows, why := "-", "-", "-", ""
		if len(j.Runs) > 0 {
			r := j.Runs[0]
			last, outcome, rows, why = timefmt.Human(r.StartedAt), r.Outcome, thousands(r.RowsAffected), shorten(r.Error, 60)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", j.Name, j.Schedule, holderLine(j), timeCell(j.LastSuccessAt),
			last, outcome, rows, why)
	}
	tw.Flush()
}

// holderLine says who holds a job by the console's rule (cron.Holder):
// "idle, last run by instance (token 3)", "running on instance (token 3)",
// or "STALLED on instance (token 3)", a run marked running whose lease
// expired. An expired lease between runs is the normal state, not a fault.
func holderLine(j cron.JobView) string {
	h := j.Holder()
	who := h.Holder + " (token " + strconv.FormatInt(h.Token, 10) + ")"
	switch h.State {
	case "running":
		return "running on " + who
	case "stalled":
		return "STALLED on " + who + ": lease expired " + timefmt.Human(h.ExpiresAt)
	case "idle":
		return "idle, last run by " + who
	}
	return "-"
}

// timeCell formats an optional time for a table cell: "-" for none.
func timeCell(t *time.Time) string {
	if t == nil {
		return "-"
	}
	return timefmt.Human(*t)
}

// printRuns prints a job's recent runs, newest first.
func printRuns(env cliEnv, j cron.JobView) {
	fmt.Fprintf(env.stdout, "%s: schedule %s, %s, last success %s\n", j.Name, j.Schedule, holderLine(j), timeCell(j.LastSuccessAt))
	if j.Holder().State == "stalled" {
		fmt.Fprintln(env.stdout, "stalled: its latest run is marked running but its holder stopped renewing the lease (it died, restarted or was paused); the next instance to take the job closes it")
	}
	fmt.Fprintln(env.stdout)
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RUN\tTICK\tINSTANCE\tTOKEN\tSTARTED\tFINISHED\tOUTCOME\tROWS\tERROR")
	for _, r := range j.Runs {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%s\t%s\t%s\t%s\t%s\n", r.ID, timefmt.Human(r.Tick), r.Instance, r.Token,
			timefmt.Human(r.StartedAt), timeCell(r.FinishedAt), r.Outcome, thousands(r.RowsAffected), shorten(r.Error, 60))
	}
	tw.Flush()
}
