package console

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A replay's plan in words (where it publishes, how fast, when it
// starts), the same on the confirmation, an approval request, the
// replays list and a task's page; and what the broker says of its target
// before it runs.

// targetWords says where a replay publishes. The default exchange ("")
// is named as such, with what it does: it delivers to the queue its
// routing key names, and nowhere else.
func targetWords(t *replay.Target) string {
	switch {
	case t == nil:
		return "each message's source exchange and routing key"
	case t.Exchange == "":
		return "the default exchange with routing key " + strconv.Quote(t.RoutingKey) +
			", which routes only to the queue named " + strconv.Quote(t.RoutingKey)
	}
	return "exchange " + strconv.Quote(t.Exchange) + " with routing key " + strconv.Quote(t.RoutingKey)
}

// formTarget is the target a replay form asks for: nil when both fields
// are empty (each message's source), as selection.replayRequest sends it.
func formTarget(exchange, routingKey string) *replay.Target {
	if exchange == "" && routingKey == "" {
		return nil
	}
	return &replay.Target{Exchange: exchange, RoutingKey: routingKey}
}

// spanWords is a length of time in its two largest units: "45 s",
// "5 min", "5 min 30 s", "2 h 5 min", "3 days 4 h".
func spanWords(d time.Duration) string {
	s := int64(max(d, 0) / time.Second)
	two := func(a int64, ua string, b int64, ub string) string {
		out := strconv.FormatInt(a, 10) + " " + ua
		if b > 0 {
			out += " " + strconv.FormatInt(b, 10) + " " + ub
		}
		return out
	}
	switch {
	case s < 60:
		return strconv.FormatInt(s, 10) + " s"
	case s < 3600:
		return two(s/60, "min", s%60, "s")
	case s < 86400:
		return two(s/3600, "h", s%3600/60, "min")
	case s < 2*86400:
		return two(1, "day", s%86400/3600, "h")
	}
	return two(s/86400, "days", s%86400/3600, "h")
}

// secondsWords is spanWords of a number of seconds (an int or int64, as
// replay.Request and the form hold them), for the templates.
func secondsWords(secs any) string {
	switch v := secs.(type) {
	case int:
		return spanWords(time.Duration(v) * time.Second)
	case int64:
		return spanWords(time.Duration(v) * time.Second)
	}
	return fmt.Sprint(secs) + " s"
}

// soonWords says when something just recorded happens (a task starts, a
// request expires), with how soon: "2026-11-30 15:10:42 UTC (in 5 min)",
// as the pages show times beside how soon they are.
func soonWords(at, now time.Time) string {
	// To the second: a delay of 5 min (an expiry in 24 h) just recorded
	// reads "in 5 min", not "in 4 min" for the milliseconds since.
	now = at.Add(-at.Sub(now).Round(time.Second))
	return fmtTime(at) + " (" + relative(at, now) + ")"
}

// checkTarget asks the layer what the broker says of a replay's target
// now (nothing for each message's source). A look that fails (no broker
// on this instance, the broker unreachable, a caller who may not start a
// replay) says nothing missing: the task looks again before it publishes.
func (c *Console) checkTarget(ctx context.Context, r *http.Request, caller ops.Caller, t *replay.Target) ops.TargetCheck {
	if t == nil {
		return ops.TargetCheck{}
	}
	check, err := c.cfg.Ops.CheckReplayTarget(ctx, caller, t)
	if err != nil {
		if ops.Classify(err) == ops.CodeInternal {
			c.log.Warn("console: look up a replay's target", "exchange", t.Exchange, "routing_key", t.RoutingKey, "error", err,
				"request_id", c.cfg.RequestID(r.Context()))
		}
		return ops.TargetCheck{}
	}
	return check
}

// missingWords says what the broker lacks for a replay's target, "" when
// nothing.
func missingWords(check ops.TargetCheck) string {
	switch {
	case check.MissingExchange != "":
		return "exchange " + strconv.Quote(check.MissingExchange) + " does not exist on the broker"
	case check.MissingQueue != "":
		return "no queue named " + strconv.Quote(check.MissingQueue) + " exists on the broker, and the default exchange delivers only there"
	}
	return ""
}

// startedWords is the flash of a replay task just recorded: what it will
// do, and when. "Done: Replay started" only for one that starts now and
// may publish; a delayed one is "Scheduled:" with its start time; one
// known to publish nothing (every message skipped, or its target missing
// on the broker now) is a "Note:" that says so and what to do.
func (c *Console) startedWords(r *http.Request, caller ops.Caller, t replay.Task) (string, []any) {
	now := time.Now()
	delayed := !store.TaskFinished(t.Status) && t.StartAt.After(now)
	requested := ", " + counted(t.Requested, "message") + " requested"
	when := "started"
	if delayed {
		when = "scheduled to start at " + soonWords(t.StartAt, now)
	}
	if t.Requested > 0 && t.Remaining == 0 {
		why := ""
		if reasons := skipWords(t.SkipReasons); len(reasons) > 0 {
			why = " (" + strings.Join(reasons, ", ") + ")"
		}
		return flashNote, []any{"Nothing to publish: ", taskLink(t.ID), " skips all " + counted(t.Requested, "message") + why + ": it ends without publishing any."}
	}
	if check := c.checkTarget(r.Context(), r, caller, t.Request.Target); check.Missing() {
		return flashNote, []any{"Replay ", when + ": ", taskLink(t.ID), requested + ", but as things stand it will publish nothing: " +
			missingWords(check) + ". Each message would fail and stay pending. " + check.Advice + " You may cancel it on its page."}
	}
	if delayed {
		return flashScheduled, []any{"Replay scheduled: ", taskLink(t.ID), requested + ", to start at " + soonWords(t.StartAt, now) +
			". Nothing is published before then; you may cancel it on its page."}
	}
	return flashDone, []any{"Replay started: ", taskLink(t.ID), requested + "."}
}

// TargetWords is a replay selection's target in words.
func (s selection) TargetWords() string {
	return targetWords(formTarget(s.TargetExchange, s.TargetRoutingKey))
}

// nothingToPublish is, for a replay whose confirmation counted nothing to
// publish, the layer's dry run of it now when it still finds nothing
// (every message would be skipped, with the reasons); nil otherwise. A
// confirmation that counted some is not asked again: the count is what
// the task will find, or near it.
func (c *Console) nothingToPublish(r *http.Request, s selection) *replay.Task {
	if s.Counted != 0 {
		return nil
	}
	req, err := s.replayRequest(true)
	if err != nil {
		return nil
	}
	dry, err := c.cfg.Ops.StartReplay(r.Context(), c.caller(r), req)
	if err != nil || dry.Error != "" || dry.Remaining > 0 {
		return nil
	}
	return &dry
}
