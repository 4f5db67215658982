package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"os"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/dlq/dlq/control"
	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// waitTask polls a task until it finishes, drawing its progress on stderr.
func waitTask(ctx context.Context, c *control.Client, task replay.Task, rf rpcFlags) int {
	bar := newProgress(os.Stderr)
	var last json.RawMessage
	for {
		bar.draw(task)
		if store.TaskFinished(task.Status) {
			break
		}
		select {
		case <-ctx.Done():
			bar.done()
			fmt.Fprintf(os.Stderr, "dlq replay: stopped waiting; task %d goes on (dlq cancel %d stops it)\n", task.ID, task.ID)
			return ExitFailure
		case <-time.After(500 * time.Millisecond):
		}
		res, code := send(ctx, "replay", c, control.Command{Command: control.CmdReplayStatus, ID: task.ID}, rf.timeout)
		if code >= 0 {
			bar.done()
			return code
		}
		last = res
		if err := json.Unmarshal(res, &task); err != nil {
			bar.done()
			fmt.Fprintf(os.Stderr, "dlq replay: decode answer: %v\n", err)
			return ExitFailure
		}
	}
	bar.done()
	if rf.json && last != nil {
		printJSON(last)
	} else if !rf.json {
		printTask(os.Stdout, task)
	}
	return finishedTask(os.Stderr, task)
}

// finishedTask tells on w what a finished task left undone and what to do
// about it, and returns the exit code: 1 unless it published what it could.
func finishedTask(w io.Writer, task replay.Task) int {
	if task.Status != replay.StatusCompleted {
		fmt.Fprintf(w, "dlq replay: task %d ended %s: %s\n", task.ID, task.Status, task.Error)
		return ExitFailure
	}
	printSkipHints(w, task)
	if task.Failed > 0 || task.Unknown > 0 {
		fmt.Fprintf(w, "dlq replay: %d messages failed and %d have an unknown outcome; they are pending with the reason: list them with %s\n",
			task.Failed, task.Unknown, failedListCommand(task))
		return ExitFailure
	}
	if task.Outcome == replay.OutcomeNonePublished && task.Requested > 0 {
		fmt.Fprintf(w, "dlq replay: task %d published none of its %d messages\n", task.ID, task.Requested)
		return ExitFailure
	}
	return ExitOK
}

// skipHints say, by skip reason, why a message was not replayed and what
// to do about it; a reason not named here is printed with its count alone.
var skipHints = map[string]string{
	store.SkipMaxReplays: "the loop guard: replayed max_replays times already; replay again with --force if the consumer is fixed",
	store.SkipNotPending: "no longer pending when its turn came: already replayed or acknowledged (dlq show ID says which)",
	store.SkipDeleted:    "deleted before its turn came: nothing left to replay",
	store.SkipNotFound:   "no message ever had the id: check the ids for a typo",
}

// printSkipHints tells, for each reason a finished task skipped messages
// for, what it means and what to do: a replay that skipped is not silent.
func printSkipHints(w io.Writer, t replay.Task) {
	for _, k := range slices.Sorted(maps.Keys(t.SkipReasons)) {
		hint := skipHints[k]
		if hint == "" {
			hint = "not replayed"
		}
		fmt.Fprintf(w, "dlq replay: skipped %d (%s): %s\n", t.SkipReasons[k], k, hint)
	}
	if len(t.SkipReasons) == 0 && t.Skipped > 0 {
		fmt.Fprintf(w, "dlq replay: skipped %d: not replayed (dlq ls --replay-task %d --replay-outcome skipped --status all lists them)\n", t.Skipped, t.ID)
	}
}

// progress draws a one-line progress bar: rewritten in place on a
// terminal, one line every few seconds otherwise.
type progress struct {
	w        io.Writer
	terminal bool
	lastLine time.Time
	drawn    bool
}

func newProgress(f *os.File) *progress {
	fi, err := f.Stat()
	return &progress{w: f, terminal: err == nil && fi.Mode()&os.ModeCharDevice != 0}
}

func (p *progress) draw(t replay.Task) {
	const width = 30
	settled := t.Requested - t.Remaining
	filled := 0
	if t.Requested > 0 {
		filled = int(settled * width / t.Requested)
	}
	line := fmt.Sprintf("[%s%s] %d/%d  published %d  failed %d  skipped %d  unknown %d  republished %d  (%s)",
		strings.Repeat("=", filled), strings.Repeat(" ", width-filled), settled, t.Requested,
		t.Published, t.Failed, t.Skipped, t.Unknown, t.Republished, t.Status)
	switch {
	case p.terminal:
		fmt.Fprintf(p.w, "\r%s\033[K", line)
		p.drawn = true
	case time.Since(p.lastLine) >= 5*time.Second || store.TaskFinished(t.Status):
		fmt.Fprintln(p.w, line)
		p.lastLine = time.Now()
	}
}

func (p *progress) done() {
	if p.terminal && p.drawn {
		fmt.Fprintln(p.w)
	}
}

func printTask(w io.Writer, t replay.Task) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "task\t%d\n", t.ID)
	fmt.Fprintf(tw, "status\t%s\n", t.Status)
	if t.Outcome != "" {
		fmt.Fprintf(tw, "outcome\t%s\n", t.Outcome)
	}
	fmt.Fprintf(tw, "requested\t%d\n", t.Requested)
	fmt.Fprintf(tw, "published\t%d\n", t.Published)
	fmt.Fprintf(tw, "failed\t%d\n", t.Failed)
	for _, e := range t.Errors {
		fmt.Fprintf(tw, "  %s\t%d: %s\n", e.Outcome, e.Count, e.Error)
	}
	fmt.Fprintf(tw, "skipped\t%d%s\n", t.Skipped, skipReasons(t.SkipReasons))
	fmt.Fprintf(tw, "unknown\t%d\n", t.Unknown)
	fmt.Fprintf(tw, "republished\t%d\n", t.Republished)
	fmt.Fprintf(tw, "remaining\t%d\n", t.Remaining)
	if t.Request.OnUnknown != "" {
		fmt.Fprintf(tw, "on unknown\t%s\n", t.Request.OnUnknown)
	}
	if t.Request.RatePerSecond > 0 {
		fmt.Fprintf(tw, "rate\t%g/s\n", t.Request.RatePerSecond)
	}
	if tg := t.Request.Target; tg != nil {
		fmt.Fprintf(tw, "target\texchange %q, routing key %q\n", tg.Exchange, tg.RoutingKey)
	}
	if c := t.Request.Canary; c != nil {
		fmt.Fprintf(tw, "canary\t%d messages, %ds\n", c.Count, c.WaitSeconds)
	}
	fmt.Fprintf(tw, "created\t%s by %s\n", timefmt.Human(t.CreatedAt), t.CreatedBy)
	if t.ApprovedBy != "" {
		fmt.Fprintf(tw, "approved\tby %s (approval %d)\n", t.ApprovedBy, t.ApprovalID)
	}
	fmt.Fprintf(tw, "start\t%s\n", timefmt.Human(t.StartAt))
	if t.FinishedAt != nil {
		fmt.Fprintf(tw, "finished\t%s\n", timefmt.Human(*t.FinishedAt))
	}
	if t.Error != "" {
		fmt.Fprintf(tw, "error\t%s\n", t.Error)
	}
	tw.Flush()
}

// failedListCommand is the command (or two) that lists a task's messages
// that did not publish, by the outcome they had; the filter takes one
// outcome at a time.
func failedListCommand(t replay.Task) string {
	var cmds []string
	for _, o := range []struct {
		n       int64
		outcome string
	}{{t.Failed, store.OutcomeFailed}, {t.Unknown, store.OutcomeUnknown}} {
		if o.n > 0 {
			cmds = append(cmds, fmt.Sprintf("dlq ls --replay-task %d --replay-outcome %s --status all", t.ID, o.outcome))
		}
	}
	return strings.Join(cmds, " and ")
}

// skipReasons formats a task's skip breakdown: " (max_replays 2, deleted 1)".
func skipReasons(r map[string]int64) string {
	if len(r) == 0 {
		return ""
	}
	keys := slices.Sorted(maps.Keys(r))
	parts := make([]string, len(keys))
	for i, k := range keys {
		parts[i] = fmt.Sprintf("%s %d", k, r[k])
	}
	return " (" + strings.Join(parts, ", ") + ")"
}
