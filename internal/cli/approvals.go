package cli

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// runApprovals lists requests for approval, newest first, or shows one
// (dlq approvals ID) in full.
func runApprovals(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq approvals", flag.ContinueOnError)
	var (
		af    apiFlags
		limit int
	)
	af.register(fs, env)
	fs.IntVar(&limit, "limit", 50, "requests to show, newest first (at most 1000)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq approvals [flags] [ID]   requests for approval (four-eyes), newest first; with an id, that request in full")
		fs.PrintDefaults()
	}
	pos, code := parseArgs(fs, args, env)
	if code >= 0 {
		return code
	}
	if len(pos) > 1 {
		fmt.Fprintf(env.stderr, "dlq approvals: give at most one approval id, not %d: %q\n", len(pos), pos)
		return ExitUsage
	}
	c := newAPIClient("approvals", af, env)
	if len(pos) == 1 {
		id, err := strconv.ParseInt(pos[0], 10, 64)
		if err != nil || id <= 0 {
			fmt.Fprintf(env.stderr, "dlq approvals: %q is not an approval id: give a request's number, or none to list them (see dlq approvals -h)\n", pos[0])
			return ExitUsage
		}
		return showApproval(c, af, id)
	}
	out, code := answer[struct{ Approvals []store.Approval }](c, af.json, "GET", "/api/v1/approvals", url.Values{"limit": {strconv.Itoa(limit)}}, nil)
	if code >= 0 {
		return code
	}
	tw := tabwriter.NewWriter(env.stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tACTION\tCOUNT\tREQUESTED BY\tREQUESTED AT\tEXPIRES AT\tDECIDED BY\tSELECTION")
	for _, a := range out.Approvals {
		decided := a.DecidedBy
		if decided == "" {
			decided = "-"
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.ID, a.Status, a.Action, thousands(a.Count), a.RequestedBy,
			timefmt.Human(a.CreatedAt), timefmt.Human(a.ExpiresAt), decided,
			shorten(selectionLine(a.Request), 60))
		// What a replay would do once approved, on a line of its own
		// under the selection: where it publishes, how fast, when.
		if a.Action == store.ActionReplay {
			fmt.Fprintf(tw, "\t\t\t\t\t\t\t\t%s\n", strings.Join(replayWords(a.Request), ", "))
		}
	}
	tw.Flush()
	listFull(env.stderr, "approvals", len(out.Approvals), limit)
	return ExitOK
}

// showApproval prints one request for approval in full.
func showApproval(c *apiClient, af apiFlags, id int64) int {
	a, code := answer[store.Approval](c, af.json, "GET", "/api/v1/approvals/"+strconv.FormatInt(id, 10), nil, nil)
	if code >= 0 {
		return code
	}
	printApproval(c.env.stdout, a)
	return ExitOK
}

// printApproval prints a request's fields, one a line, a replay's with
// what it would do in words.
func printApproval(w io.Writer, a store.Approval) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", strconv.FormatInt(a.ID, 10))
	row("status", a.Status)
	row("action", fmt.Sprintf("%s of %s messages (its snapshot)", a.Action, thousands(a.Count)))
	row("requested by", fmt.Sprintf("%s via %s at %s", a.RequestedBy, a.RequestedVia, timefmt.Human(a.CreatedAt)))
	if a.Scope != nil {
		row("scope", strings.Join(a.Scope, ", "))
	}
	row("expires at", timefmt.Human(a.ExpiresAt))
	if a.DecidedBy != "" {
		d := a.DecidedBy
		if a.DecidedAt != nil {
			d += " at " + timefmt.Human(*a.DecidedAt)
		}
		row("decided by", d)
	}
	if a.Reason != "" {
		row("reason", a.Reason)
	}
	row("selection", selectionLine(a.Request))
	if a.Action == store.ActionReplay {
		for _, s := range replayWords(a.Request) {
			k, v, _ := strings.Cut(s, ": ")
			row(k, v)
		}
	}
	tw.Flush()
	for _, part := range []struct {
		name string
		raw  json.RawMessage
	}{{"request", a.Request}, {"result", a.Result}} {
		if len(part.raw) > 0 && string(part.raw) != "null" {
			fmt.Fprintf(w, "\n%s:\n%s\n", part.name, indentJSON(part.raw))
		}
	}
}

// indentJSON is raw indented, or raw as it is when it is not JSON.
func indentJSON(raw json.RawMessage) string {
	var b bytes.Buffer
	if json.Indent(&b, raw, "", "  ") != nil {
		return string(raw)
	}
	return b.String()
}

// replayWords says what a replay request does beyond its selection, each
// as "what: how": target, rate, start, on_unknown, and canary and force
// when asked for.
func replayWords(request json.RawMessage) []string {
	var r replay.Request
	if json.Unmarshal(request, &r) != nil {
		return []string{"replay: (unreadable request)"}
	}
	target := "to each message's source"
	if r.Target != nil {
		ex := fmt.Sprintf("exchange %q", r.Target.Exchange)
		if r.Target.Exchange == "" {
			ex = "the default exchange"
		}
		target = fmt.Sprintf("to %s, routing key %q", ex, r.Target.RoutingKey)
	}
	rate := "as fast as confirms allow"
	if r.RatePerSecond > 0 {
		rate = strconv.FormatFloat(r.RatePerSecond, 'f', -1, 64) + " messages/s"
	}
	start := "when approved"
	switch {
	case r.StartAt != nil:
		start = "at " + timefmt.Human(*r.StartAt)
	case r.DelaySeconds > 0:
		start = (time.Duration(r.DelaySeconds) * time.Second).String() + " after approval"
	}
	onUnknown := r.OnUnknown
	if onUnknown == "" {
		onUnknown = "the configured default (replay.on_unknown)"
	}
	out := []string{"target: " + target, "rate: " + rate, "start: " + start, "on_unknown: " + onUnknown}
	if r.Canary != nil {
		out = append(out, fmt.Sprintf("canary: %d messages, then wait %ds", r.Canary.Count, r.Canary.WaitSeconds))
	}
	if r.Force {
		out = append(out, "force: replays messages past max_replays too")
	}
	return out
}

// selectionLine shows what a request selects: its filter or its ids.
func selectionLine(request json.RawMessage) string {
	var r struct {
		IDs    []int64         `json:"ids"`
		Filter json.RawMessage `json:"filter"`
		Limit  int             `json:"limit"`
	}
	if json.Unmarshal(request, &r) != nil {
		return ""
	}
	s := string(r.Filter)
	if len(r.IDs) > 0 {
		s = fmt.Sprintf("%d ids", len(r.IDs))
	}
	if r.Limit > 0 {
		s += fmt.Sprintf(" limit %d", r.Limit)
	}
	return s
}
