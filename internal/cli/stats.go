package cli

import (
	"flag"
	"fmt"
	"net/url"
	"slices"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// Groups runs `dlq groups`: failure groups, largest first.
func Groups(args []string) int { return runGroups(args, osEnv()) }

// Stats runs `dlq stats`: the overview.
func Stats(args []string) int { return runStats(args, osEnv()) }

// Status runs `dlq status`: the per queue counts.
func Status(args []string) int { return runStatus(args, osEnv()) }

// runGroups lists failure groups, largest first.
func runGroups(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq groups", flag.ContinueOnError)
	var (
		af            apiFlags
		queue, status string
		category      string
		limit         int
	)
	af.register(fs, env)
	fs.StringVar(&queue, "queue", "", "only this source queue")
	fs.StringVar(&status, "status", "", "count (and order by) this status: pending (default), replaying, replayed, acknowledged, all")
	fs.StringVar(&category, "category", "", "only groups of this failure category: transient, permanent, unknown (or a comma list)")
	fs.IntVar(&limit, "limit", 20, "groups to show (at most 1000)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq groups [flags]   failure groups, largest first")
		fs.PrintDefaults()
	}
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("groups", af, env)
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	if queue != "" {
		q.Set("source_queue", queue)
	}
	if status != "" {
		q.Set("status", status)
	}
	if category != "" {
		q.Set("category", category)
	}
	out, code := answer[struct{ Groups []store.Group }](c, af.json, "GET", "/api/v1/groups", q, nil)
	if code >= 0 {
		return code
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "GROUP\tQUEUE\tCATEGORY\tPENDING\tTOTAL\tLAST SEEN\t FAILURE\t")
	for _, g := range out.Groups {
		what := g.FailureType
		if g.Pattern != "" {
			what += ": " + g.Pattern
		}
		if what == "" {
			what = "(" + g.Reason + ", no failure details)"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t %s\t\n", g.ID, g.SourceQueue, g.Category, thousands(g.Counts.Pending), thousands(g.Total),
			timefmt.Human(g.LastSeen), shorten(what, 80))
	}
	tw.Flush()
	if len(out.Groups) == 0 {
		what := "no groups match"
		if status == "" {
			// By default a group is listed only while it has pending
			// messages: an empty list does not mean no failures.
			what += " with pending messages (--status all lists every group)"
		}
		c.nothingMatched(what, queue)
	}
	return ExitOK
}

// runStats prints the overview.
func runStats(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq stats", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("stats", af, env)
	st, code := answer[store.Stats](c, af.json, "GET", "/api/v1/stats", nil, nil)
	if code >= 0 {
		return code
	}
	w := env.stdout
	s := st.ByStatus
	fmt.Fprintf(w, "messages: %s pending, %s replaying, %s replayed, %s acknowledged (%s bytes)\n",
		thousands(s.Pending), thousands(s.Replaying), thousands(s.Replayed), thousands(s.Acknowledged), thousands(st.Bytes))
	if st.OldestPending != nil {
		fmt.Fprintf(w, "oldest pending: %s in %s (since %s)\n", (time.Duration(st.OldestPending.AgeSeconds) * time.Second).String(),
			st.OldestPending.SourceQueue, timefmt.Human(st.OldestPending.FailedAt))
	}
	fmt.Fprintf(w, "repeat failures (replayed, dead again, pending): %s\n", thousands(st.RepeatFailures))
	a := st.Last24h
	fmt.Fprintf(w, "last 24 h: %s new, %s returned after replay, %s replayed, %s acknowledged, %s deleted\n",
		thousands(a.New), thousands(a.Returned), thousands(a.Replayed), thousands(a.Acknowledged), thousands(a.Deleted))
	if len(st.ByReason) > 0 {
		fmt.Fprintln(w, "\nby reason (pending / total):")
		reasons := make([]string, 0, len(st.ByReason))
		for r := range st.ByReason {
			reasons = append(reasons, r)
		}
		slices.Sort(reasons)
		for _, r := range reasons {
			c := st.ByReason[r]
			fmt.Fprintf(w, "  %-16s %s / %s\n", r, thousands(c.Pending), thousands(c.Total()))
		}
	}
	if len(st.ByCategory) > 0 {
		fmt.Fprintln(w, "\nby category (pending / total):")
		for _, cat := range store.Categories {
			c := st.ByCategory[cat]
			fmt.Fprintf(w, "  %-16s %s / %s\n", cat, thousands(c.Pending), thousands(c.Total()))
		}
	}
	if cs := st.Categorisation; cs != nil && cs.Pass != nil {
		p := cs.Pass
		fmt.Fprintf(w, "recomputing categories for new rules: %s of ids up to %s done, %s changed\n",
			thousands(p.Cursor), thousands(p.MaxID), thousands(p.Changed))
	}
	fmt.Fprintln(w)
	printQueues(w, st.BySourceQueue)
	if len(st.TopGroups) > 0 {
		fmt.Fprintln(w, "\ntop failure groups (pending):")
		for _, g := range st.TopGroups {
			fmt.Fprintf(w, "  %s: %s × %s\n", g.SourceQueue, thousands(g.Counts.Pending), shorten(groupLine(g), 90))
		}
	}
	return ExitOK
}

func groupLine(g store.Group) string {
	switch {
	case g.FailureType != "" && g.SampleMessage != "":
		return g.FailureType + ": " + g.SampleMessage
	case g.FailureType != "":
		return g.FailureType
	default:
		return "(" + g.Reason + ")"
	}
}

// runStatus prints the per queue counts.
func runStatus(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq status", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("status", af, env)
	st, code := answer[struct {
		Queues []store.QueueStats `json:"queues"`
	}](c, af.json, "GET", "/api/v1/status", nil, nil)
	if code >= 0 {
		return code
	}
	printQueues(env.stdout, st.Queues)
	return ExitOK
}

func printQueues(w interface{ Write([]byte) (int, error) }, queues []store.QueueStats) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "QUEUE\tPENDING\tREPLAYING\tREPLAYED\tACKNOWLEDGED\tOLDEST PENDING\t")
	for _, q := range queues {
		oldest := "-"
		if q.OldestPendingAt != nil {
			oldest = (time.Duration(q.OldestPendingAgeSeconds) * time.Second).String()
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t\n", q.SourceQueue, thousands(q.Counts.Pending), thousands(q.Counts.Replaying),
			thousands(q.Counts.Replayed), thousands(q.Counts.Acknowledged), oldest)
	}
	tw.Flush()
}

// thousands formats n with thousands separators: 1,204.
func thousands(n int64) string {
	s := strconv.FormatInt(n, 10)
	neg := n < 0
	if neg {
		s = s[1:]
	}
	out := make([]byte, 0, len(s)+len(s)/3)
	for i := range len(s) {
		if i > 0 && (len(s)-i)%3 == 0 {
			out = append(out, ',')
		}
		out = append(out, s[i])
	}
	if neg {
		return "-" + string(out)
	}
	return string(out)
}
