package cli

import (
	"flag"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/timefmt"
)

// Alerts runs `dlq alerts`: the alerts pending, firing or just resolved,
// and the rules.
func Alerts(args []string) int { return runAlerts(args, osEnv()) }

// runAlerts prints when alerts were last evaluated, every alert that is
// pending, firing or just resolved with the time it entered that state,
// and the rules with their per-queue overrides.
func runAlerts(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq alerts", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq alerts [flags]   alerts pending, firing or just resolved, and the rules")
		fs.PrintDefaults()
	}
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("alerts", af, env)
	v, code := answer[cron.AlertsView](c, af.json, "GET", "/api/v1/alerts", nil, nil)
	if code >= 0 {
		return code
	}
	printEvaluation(env.stdout, v)
	fmt.Fprintln(env.stdout)
	printAlertStates(env.stdout, v)
	fmt.Fprintln(env.stdout, "\nrules:")
	printAlertRules(env.stdout, v)
	return ExitOK
}

// printEvaluation says when alerts were last evaluated, and, when that is
// too long ago (stale), that the states that follow are only the last
// known.
func printEvaluation(w io.Writer, v cron.AlertsView) {
	switch {
	case v.EvaluatedAt == nil:
		fmt.Fprintf(w, "not evaluated yet (schedule %s)\n", v.Schedule)
	case v.Stale:
		fmt.Fprintf(w, "STALE: alert evaluation is not running (the alerts job is off, or no instance runs it)\n")
		age, since := "?", "?"
		if v.AgeSeconds != nil {
			age = seconds(math.Round(*v.AgeSeconds))
		}
		if v.StaleAfter != nil {
			since = timefmt.Human(*v.StaleAfter)
		}
		fmt.Fprintf(w, "last evaluated %s, %s ago; stale since %s (schedule %s)\n", timefmt.Human(*v.EvaluatedAt),
			age, since, v.Schedule)
		fmt.Fprintln(w, "no alert is known to be firing; the states below are the last known")
	default:
		fmt.Fprintf(w, "evaluated %s (schedule %s)\n", timefmt.Human(*v.EvaluatedAt), v.Schedule)
	}
}

// printAlertStates prints the alerts pending, firing or just resolved,
// one row each. It takes the view whole: the command line reads the
// answer's types through cron, not the alerts package (test/imports).
func printAlertStates(w io.Writer, v cron.AlertsView) {
	as := v.Alerts
	if len(as) == 0 {
		fmt.Fprintln(w, "no alert is pending, firing or just resolved")
		return
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tQUEUE\tSTATE\tSINCE\tSEVERITY\tVALUE\tTHRESHOLD")
	for _, a := range as {
		queue := a.SourceQueue
		if queue == "" {
			queue = "-"
		}
		state := string(a.State)
		if a.LastState != "" {
			state += " (was " + string(a.LastState) + ")"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.Rule, queue, state, timefmt.Human(a.Since),
			a.Severity, number(a.Value), number(a.Threshold))
	}
	tw.Flush()
}

// printAlertRules prints the rules, one row each, with their per-queue
// overrides.
func printAlertRules(w io.Writer, v cron.AlertsView) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "RULE\tKIND\tTHRESHOLD\tFOR\tSEVERITY\tQUEUE OVERRIDES")
	for i, r := range v.Rules {
		threshold := number(r.Threshold)
		if r.Disabled {
			threshold = "disabled"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\n", r.Name, r.Kind, threshold, seconds(r.ForSeconds), r.Severity, overridesCell(v, i))
	}
	tw.Flush()
}

// overridesCell lists rule number rule's per-queue overrides in queue order
// ("audit disabled, orders 1000 for 5m0s"), "-" without any.
func overridesCell(v cron.AlertsView, rule int) string {
	r := v.Rules[rule]
	overrides := "-"
	for i, q := range slices.Sorted(maps.Keys(r.Overrides)) {
		o := r.Overrides[q]
		if i == 0 {
			overrides = ""
		} else {
			overrides += ", "
		}
		if o.Disabled {
			overrides += q + " disabled"
		} else {
			overrides += q + " " + number(o.Threshold) + " for " + seconds(o.ForSeconds)
		}
	}
	return overrides
}

// number formats a rule's value or threshold without trailing zeros.
func number(f float64) string { return strconv.FormatFloat(f, 'f', -1, 64) }

// seconds formats a duration in seconds as Go does (5m0s).
func seconds(s float64) string { return (time.Duration(s * float64(time.Second))).String() }
