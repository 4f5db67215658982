package cli

import (
	"cmp"
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode/utf8"

	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// Ls runs `dlq ls`: dead messages, newest first.
func Ls(args []string) int { return runLs(args, osEnv()) }

// Show runs `dlq show`: one message with its body.
func Show(args []string) int { return runShow(args, osEnv()) }

// Ack runs `dlq ack`: acknowledge messages by id or filter.
func Ack(args []string) int { return runAction("ack", args, osEnv()) }

// Rm runs `dlq rm`: delete messages by id or filter.
func Rm(args []string) int { return runAction("rm", args, osEnv()) }

// filterFlags are the message filters of ls, ack, rm, export and replay, one
// definition for all five. The queue and the time range have two spellings:
// dlq replay named them --source-queue, --since and --until, the others
// --queue, --after and --before. Every command takes both, so that scripts
// written for either keep working and neither name is a trap.
type filterFlags struct {
	status, queue, reason, category, group, q string
	after, before                             timeFlag
	fields                                    []string
	// replayTask and replayOutcome select the messages of one replay task
	// by how they fared in it: where a replay's failures are listed.
	replayTask    int64
	replayOutcome string
}

// timeFlag is a time flag's text and the name it was given under, so that
// an error names the flag the user typed.
type timeFlag struct{ text, name string }

// set returns the flag function that records the text under name.
func (t *timeFlag) set(name string) func(string) error {
	return func(s string) error {
		t.text, t.name = s, name
		return nil
	}
}

func (f *filterFlags) register(fs *flag.FlagSet) {
	queue := func(s string) error { f.queue = s; return nil }
	fs.StringVar(&f.status, "status", "", "status: pending (default), replaying, replayed, acknowledged, a comma list, or all")
	fs.Func("queue", "the source queue, where the messages died, by `name`", queue)
	fs.Func("source-queue", "the same as --queue `name`", queue)
	fs.StringVar(&f.reason, "reason", "", "death reason: rejected, expired, maxlen, delivery_limit")
	fs.StringVar(&f.category, "category", "", "failure category: transient, permanent, unknown (or a comma list)")
	fs.StringVar(&f.group, "group", "", "failure group id (see dlq groups)")
	fs.StringVar(&f.q, "q", "", "search every queue: ids and header values whole, failure text, words (a phrase; a trailing * makes the last word a prefix) of failure type/message/stack, header values and text bodies; byte substrings of bodies with --queue")
	fs.Func("after", "failed at or after this `time`: RFC 3339, or a duration ago (24h)", f.after.set("after"))
	fs.Func("since", "the same as --after `time`", f.after.set("since"))
	fs.Func("before", "failed before this `time`: RFC 3339, or a duration ago", f.before.set("before"))
	fs.Func("until", "the same as --before `time`", f.before.set("until"))
	fs.Func("field", "a `condition` on JSON bodies, repeatable: path=value, path!=value, path<n, path>=n, path? (exists); "+
		"e.g. customer.tier=gold (needs --queue, --after, --group or --q besides)", func(s string) error {
		f.fields = append(f.fields, s)
		return nil
	})
	fs.Int64Var(&f.replayTask, "replay-task", 0, "the messages of replay task `id` (see dlq replays)")
	fs.StringVar(&f.replayOutcome, "replay-outcome", "", "with --replay-task: how they fared in it: published, failed, unknown or skipped")
}

// times reads the time range; its errors name the flags as they were given.
func (f *filterFlags) times(now time.Time) (after, before *time.Time, err error) {
	if after, err = when(cmp.Or(f.after.name, "after"), f.after.text, now); err != nil {
		return nil, nil, err
	}
	if before, err = when(cmp.Or(f.before.name, "before"), f.before.text, now); err != nil {
		return nil, nil, err
	}
	if after != nil && before != nil && !after.Before(*before) {
		return nil, nil, fmt.Errorf("--%s (%s) must be before --%s (%s)",
			f.after.name, after.Format(time.RFC3339), f.before.name, before.Format(time.RFC3339))
	}
	return after, before, nil
}

// when reads a time flag, as timeArg does, into a time; nil when not given.
func when(name, s string, now time.Time) (*time.Time, error) {
	v, err := timeArg(name, s, now)
	if err != nil || v == "" {
		return nil, err
	}
	t, err := time.Parse(time.RFC3339, v)
	if err != nil {
		return nil, fmt.Errorf("--%s %q: %w", name, s, err)
	}
	return &t, nil
}

// query is the filter as the API's query parameters (ls, export).
func (f *filterFlags) query(now time.Time) (url.Values, error) {
	v := url.Values{}
	for k, s := range map[string]string{"status": f.status, "source_queue": f.queue, "reason": f.reason, "category": f.category, "group": f.group, "q": f.q} {
		if s != "" {
			v.Set(k, s)
		}
	}
	after, before, err := f.times(now)
	if err != nil {
		return nil, err
	}
	if after != nil {
		v.Set("failed_after", after.Format(time.RFC3339))
	}
	if before != nil {
		v.Set("failed_before", before.Format(time.RFC3339))
	}
	for _, field := range f.fields {
		v.Add("field", field)
	}
	if f.replayTask != 0 {
		v.Set("replay_task", strconv.FormatInt(f.replayTask, 10))
	}
	if f.replayOutcome != "" {
		v.Set("replay_outcome", f.replayOutcome)
	}
	return v, nil
}

// filter is the JSON filter of a bulk action (ack, rm).
func (f *filterFlags) filter(now time.Time) (map[string]any, error) {
	v, err := f.query(now)
	if err != nil {
		return nil, err
	}
	out := map[string]any{}
	for k := range v {
		out[k] = v.Get(k)
	}
	if len(f.fields) > 0 {
		out["fields"] = f.fields
		delete(out, "field")
	}
	if f.replayTask != 0 {
		out["replay_task"] = f.replayTask
	}
	return out, nil
}

// storeFilter is the filter as the control queue's replay command takes it.
func (f *filterFlags) storeFilter(now time.Time) (*store.Filter, error) {
	after, before, err := f.times(now)
	if err != nil {
		return nil, err
	}
	return &store.Filter{SourceQueue: f.queue, Reason: f.reason, Status: f.status, Query: f.q, Group: f.group,
		Category: f.category, Fields: f.fields, FailedAfter: after, FailedBefore: before,
		ReplayTask: f.replayTask, ReplayOutcome: f.replayOutcome}, nil
}

// empty says no filter flag was given.
func (f *filterFlags) empty() bool {
	return f.status == "" && f.queue == "" && f.reason == "" && f.category == "" && f.group == "" && f.q == "" &&
		f.after.text == "" && f.before.text == "" && len(f.fields) == 0 && f.replayTask == 0 && f.replayOutcome == ""
}

// runLs lists messages, newest first.
func runLs(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq ls", flag.ContinueOnError)
	var (
		af    apiFlags
		ff    filterFlags
		limit int
		curs  string
		all   bool
		total bool
	)
	af.register(fs, env)
	ff.register(fs)
	fs.IntVar(&limit, "limit", 50, "messages per page (at most 1000)")
	fs.StringVar(&curs, "cursor", "", "continue after a previous page (its next cursor)")
	fs.BoolVar(&all, "all", false, "follow cursors to the last page")
	fs.BoolVar(&total, "total", false, "say how many messages match (exact, or an estimate marked as one)")
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq ls [flags]   list dead messages, newest first")
		fs.PrintDefaults()
	}
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("ls", af, env)
	q, err := ff.query(time.Now())
	if err != nil {
		fmt.Fprintf(env.stderr, "dlq ls: %v\n", err)
		return ExitUsage
	}
	q.Set("limit", strconv.Itoa(limit))
	if curs != "" {
		q.Set("cursor", curs)
	}
	if total {
		q.Set("total", "true")
	}
	var count *store.Total
	rows := 0
	tw := c.listing()
	fmt.Fprintln(tw, "ID\tQUEUE\tREASON\tCATEGORY\tSTATUS\tFAILED AT\tREPLAYS\tFAILURE")
	code := c.pages(context.Background(), "/api/v1/messages", q, all, tw, func(b []byte) (*string, error) {
		var page struct {
			Messages   []store.Message `json:"messages"`
			NextCursor *string         `json:"next_cursor"`
			Total      *store.Total    `json:"total"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		rows += len(page.Messages)
		for _, m := range page.Messages {
			status := m.Status
			if m.AutoExhausted {
				status += " (parked)"
			}
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", m.ID, m.SourceQueue, m.Reason, m.Category, status,
				timefmt.Human(m.FailedAt), m.ReplayCount, shorten(failureLine(m.Failure), 70))
		}
		if count == nil {
			count = page.Total
		}
		return page.NextCursor, nil
	})
	if code == ExitOK && count != nil && !af.json {
		fmt.Fprintln(env.stdout, totalLine(*count))
	}
	if code == ExitOK && rows == 0 && !af.json {
		what := "no messages match"
		if curs != "" {
			what = "no more messages match"
		}
		c.nothingMatched(what, ff.queue)
	}
	return code
}

// totalLine says how many messages match: "1,284 messages match", or
// "about 1,284 messages match (estimated)".
func totalLine(t store.Total) string {
	noun := "messages match"
	if t.Value == 1 {
		noun = "message matches"
	}
	if t.Exact {
		return thousands(t.Value) + " " + noun
	}
	return "about " + thousands(t.Value) + " " + noun + " (estimated)"
}

// failureLine renders a failure as "Type: message".
func failureLine(raw json.RawMessage) string {
	var f struct{ Type, Message string }
	if len(raw) == 0 || json.Unmarshal(raw, &f) != nil {
		return ""
	}
	switch {
	case f.Type != "" && f.Message != "":
		return f.Type + ": " + f.Message
	default:
		return f.Type + f.Message
	}
}

// runShow prints one message with its headers, death record and body.
func runShow(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq show", flag.ContinueOnError)
	var af apiFlags
	af.register(fs, env)
	fs.Usage = func() {
		fmt.Fprintln(env.stderr, "usage: dlq show [flags] ID   show one dead message with its body")
		fs.PrintDefaults()
	}
	id, code := idArg(fs, args, env, "message id")
	if code >= 0 {
		return code
	}
	c := newAPIClient("show", af, env)
	m, code := answer[store.Message](c, af.json, "GET", "/api/v1/messages/"+strconv.FormatInt(id, 10), nil, nil)
	if code >= 0 {
		return code
	}
	w := env.stdout
	printMessageRows(w, m)
	for _, part := range []struct {
		name string
		raw  json.RawMessage
	}{{"properties", m.Properties}, {"headers", m.Headers}, {"x-death", m.XDeath}} {
		fmt.Fprintf(w, "\n%s:\n", part.name)
		c.printRaw(part.raw)
	}
	fmt.Fprintf(w, "\nbody (%d bytes):\n", m.BodySize)
	switch {
	case m.Body == nil:
		fmt.Fprintln(w, "(hidden: this token may not see bodies)")
	case utf8.Valid(*m.Body):
		fmt.Fprintln(w, string(*m.Body))
	default:
		fmt.Fprintln(w, "(binary, base64) "+base64.StdEncoding.EncodeToString(*m.Body))
	}
	return ExitOK
}

// printMessageRows prints dlq show's table of a message's fields.
func printMessageRows(w io.Writer, m store.Message) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	row := func(k, v string) { fmt.Fprintf(tw, "%s\t%s\n", k, v) }
	row("id", strconv.FormatInt(m.ID, 10))
	if m.MessageID != nil {
		row("message id", *m.MessageID)
	}
	row("status", m.Status)
	row("source", fmt.Sprintf("queue %s (exchange %q, routing key %q)", m.SourceQueue, m.SourceExchange, m.SourceRoutingKey))
	row("dead-letter queue", m.DeadLetterQueue)
	row("reason", fmt.Sprintf("%s (%d deaths)", m.Reason, m.DeathCount))
	row("category", m.Category)
	if m.AutoExhausted {
		row("automatic replay", "exhausted: the policies tried it as often as they may (parked for a human)")
	}
	row("failed at", timefmt.Human(m.FailedAt)+" (first "+timefmt.Human(m.FirstFailedAt)+")")
	if m.ReplayCount > 0 || m.ReplayedAt != nil {
		r := strconv.FormatInt(m.ReplayCount, 10) + " replays"
		if m.ReplayedAt != nil {
			r += ", last " + timefmt.Human(*m.ReplayedAt)
		}
		row("replayed", r)
	}
	if m.AcknowledgedAt != nil {
		row("acknowledged at", timefmt.Human(*m.AcknowledgedAt))
	}
	if m.Group != nil {
		row("failure group", *m.Group)
	}
	if f := failureLine(m.Failure); f != "" {
		row("failure", f)
	}
	if m.LastReplayError != nil {
		row("last replay error", *m.LastReplayError)
	}
	if m.ConversionError != nil {
		row("conversion error", *m.ConversionError)
	}
	if e := m.Edited; e != nil {
		// Where the corrected copy went: its replay id finds it in the
		// queue it was sent to, the task shows how the send went.
		s := fmt.Sprintf("copy %s, replay task %d, %s, by %s at %s", e.CopyReplayID, e.TaskID, e.State, e.EditedBy,
			timefmt.Human(e.EditedAt))
		if e.Error != "" {
			s += ": " + e.Error
		}
		row("edited", s)
	}
	tw.Flush()
}

// runAction acknowledges (ack) or deletes (rm) messages by id or filter.
func runAction(name string, args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq "+name, flag.ContinueOnError)
	var (
		af     apiFlags
		ff     filterFlags
		dryRun bool
		yes    bool
		limit  int
	)
	af.register(fs, env)
	ff.register(fs)
	fs.BoolVar(&dryRun, "dry-run", false, "only count what a filter selects")
	confirmFlag(fs, &yes, "yes", "confirm a large selection by filter")
	fs.IntVar(&limit, "limit", 0, "act on at most this many messages of a filter, oldest first")
	verb := map[string]string{"ack": "acknowledge", "rm": "delete"}[name]
	fs.Usage = func() {
		fmt.Fprintf(env.stderr, "usage: dlq %s [flags] [ID...]   %s messages by id, or by filter flags\n", name, verb)
		fs.PrintDefaults()
	}
	pos, code := parseArgs(fs, args, env)
	if code >= 0 {
		return code
	}
	body, err := actionBody(fs, pos, ff)
	if err != nil {
		fmt.Fprintf(env.stderr, "dlq %s: %v\n", name, err)
		return ExitUsage
	}
	body["dry_run"], body["confirm"] = dryRun, yes
	if limit > 0 {
		body["limit"] = limit
	}
	c := newAPIClient(name, af, env)
	b, err := c.call(context.Background(), "POST", "/api/v1/messages/"+verb, nil, body)
	if err != nil {
		var e *apiError
		if errors.As(err, &e) && e.code == "confirm_required" {
			fmt.Fprintf(env.stderr, "dlq %s: %s\ndlq %s: add --yes to go ahead, or --dry-run to count\n", name, e.message, name)
			return ExitUsage
		}
		return c.fail(err)
	}
	if af.json {
		c.printRaw(b)
	} else if waitsForApproval(env.stdout, b) {
		return ExitOK
	}
	// With --json too: the exit code says the same with and without it.
	var res store.ActionResult
	if err := json.Unmarshal(b, &res); err != nil {
		return c.fail(fmt.Errorf("unexpected answer: %w", err))
	}
	past := map[string]string{"ack": "acknowledged", "rm": "deleted"}[name]
	switch {
	case af.json:
	case res.DryRun:
		// As the real run says it: what would change, and what is so already.
		fmt.Fprintf(env.stdout, "dry run: %d messages would be %s", res.Matched-res.Unchanged, past)
		if res.Unchanged > 0 {
			fmt.Fprintf(env.stdout, ", %d already %s", res.Unchanged, past)
		}
		fmt.Fprintln(env.stdout)
		printDryRunApproval(env.stdout, res.DryRunApproval)
	default:
		fmt.Fprintln(env.stdout, actionWords(past, res.Changed, res.Unchanged))
	}
	if len(res.NotFound) > 0 {
		s := make([]string, len(res.NotFound))
		for i, id := range res.NotFound {
			s[i] = strconv.FormatInt(id, 10)
		}
		fmt.Fprintf(env.stderr, "dlq %s: not found: %s\n", name, strings.Join(s, ", "))
		return ExitNotFound
	}
	return ExitOK
}

// actionWords is what an acknowledge or delete did (past: "acknowledged"
// or "deleted"), as dlq ack and dlq rm say it, and dlq approve for one
// that waited for approval.
func actionWords(past string, changed, unchanged int64) string {
	s := fmt.Sprintf("%d messages %s", changed, past)
	if unchanged > 0 {
		s += fmt.Sprintf(", %d already %s", unchanged, past)
	}
	return s
}

// actionBody is what ack and rm act on: the ids given as arguments, or
// the filter of the filter flags; its error says what to give instead.
func actionBody(fs *flag.FlagSet, args []string, ff filterFlags) (map[string]any, error) {
	var ids []int64
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id <= 0 {
			return nil, fmt.Errorf("%q is not a message id", a)
		}
		ids = append(ids, id)
	}
	switch {
	case len(ids) > 0 && !ff.empty():
		return nil, errors.New("give ids or filter flags, not both")
	case len(ids) > 0 && flagGiven(fs, "limit"):
		return nil, errors.New("--limit applies to a filter (at most that many of its matches), not to ids: give only the ids to act on, or a filter with --limit")
	case len(ids) > 0:
		return map[string]any{"ids": ids}, nil
	case ff.empty():
		return nil, errors.New("give message ids, or filter flags (for example --queue orders); a filter acts on every match")
	}
	f, err := ff.filter(time.Now())
	if err != nil {
		return nil, err
	}
	return map[string]any{"filter": f}, nil
}
