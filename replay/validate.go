package replay

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/dlq/dlq/store"
)

// ErrInvalidRequest wraps every refusal of a request's content; the
// message names the field. The API answers 400, the control queue
// invalid_request.
var ErrInvalidRequest = errors.New("invalid request")

// Bounds of a request.
const (
	MaxRatePerSecond = 100_000
	MaxDelaySeconds  = 30 * 24 * 3600
	// StartAtTolerance is how far in the past start_at may be: the
	// client's clock and dlq's differ a little, and a request takes time
	// to arrive. Such a task starts at once.
	StartAtTolerance   = time.Minute
	MaxCanaryCount     = 10_000
	MaxCanaryWait      = 24 * 3600
	maxNameBytes       = 255 // AMQP short string: exchange names and routing keys
	dryRunSampleLength = 10
)

func invalid(format string, a ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrInvalidRequest}, a...)...)
}

// Validate checks a request and names the wrong field. maxMessages bounds
// limit; now is the clock start_at is judged by.
func (r Request) Validate(maxMessages int64, now time.Time) error {
	switch {
	case len(r.IDs) == 0 && r.Filter == nil:
		return invalid("ids: select messages with ids or filter (filter {} selects every pending message)")
	case len(r.IDs) > 0 && r.Filter != nil:
		return invalid("ids: give ids or filter, not both (a filter can list ids itself)")
	case len(r.IDs) > store.MaxFilterIDs:
		return invalid("ids lists %d ids; at most %d per request (use a filter for more)", len(r.IDs), store.MaxFilterIDs)
	}
	for _, id := range r.IDs {
		if id <= 0 {
			return invalid("ids: %d is not a message id", id)
		}
	}
	if r.Filter != nil {
		if err := r.Filter.Validate(); err != nil {
			return fmt.Errorf("%w: filter: %w", ErrInvalidRequest, err)
		}
	}
	if r.Limit < 0 || int64(r.Limit) > maxMessages {
		return invalid("limit %d must be between 0 (no limit) and %d", r.Limit, maxMessages)
	}
	if math.IsNaN(r.RatePerSecond) || r.RatePerSecond < 0 || r.RatePerSecond > MaxRatePerSecond {
		return invalid("rate_per_second %v must be between 0 (unthrottled) and %d", r.RatePerSecond, MaxRatePerSecond)
	}
	if r.DelaySeconds < 0 || r.DelaySeconds > MaxDelaySeconds {
		return invalid("delay_seconds %d must be between 0 and %d (30 days)", r.DelaySeconds, MaxDelaySeconds)
	}
	if err := r.checkStartAt(now); err != nil {
		return err
	}
	if t := r.Target; t != nil {
		if len(t.Exchange) > maxNameBytes || !utf8.ValidString(t.Exchange) {
			return invalid("target.exchange must be valid UTF-8 of at most %d bytes", maxNameBytes)
		}
		if len(t.RoutingKey) > maxNameBytes || !utf8.ValidString(t.RoutingKey) {
			return invalid("target.routing_key must be valid UTF-8 of at most %d bytes", maxNameBytes)
		}
		if t.Exchange == "" && strings.TrimSpace(t.RoutingKey) == "" {
			return invalid("target.routing_key is required with the default exchange (\"\"): it names the queue")
		}
	}
	if err := checkOnUnknown("on_unknown", r.OnUnknown); err != nil {
		return fmt.Errorf("%w: %w", ErrInvalidRequest, err)
	}
	if c := r.Canary; c != nil {
		if c.Count < 1 || c.Count > MaxCanaryCount {
			return invalid("canary.count %d must be between 1 and %d", c.Count, MaxCanaryCount)
		}
		if c.WaitSeconds < 0 || c.WaitSeconds > MaxCanaryWait {
			return invalid("canary.wait_seconds %d must be between 0 and %d (1 day)", c.WaitSeconds, MaxCanaryWait)
		}
	}
	return nil
}

// checkStartAt refuses a start_at given with delay_seconds, more than
// StartAtTolerance in the past, or further ahead than a delay may reach.
func (r Request) checkStartAt(now time.Time) error {
	if r.StartAt == nil {
		return nil
	}
	at := *r.StartAt
	switch {
	case r.DelaySeconds != 0:
		return invalid("give start_at or delay_seconds, not both")
	case at.Before(now.Add(-StartAtTolerance)):
		return invalid("start_at %s is in the past (now %s)", at.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	case at.After(now.Add(MaxDelaySeconds * time.Second)):
		return invalid("start_at %s is more than 30 days ahead (now %s)", at.Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	return nil
}

// startAt is when the task starts, judged at now.
func (r Request) startAt(now time.Time) time.Time {
	if r.StartAt != nil {
		return r.StartAt.UTC()
	}
	return now.Add(time.Duration(r.DelaySeconds) * time.Second).UTC()
}

// namedIDs reports whether the request selects the ids it names (and not
// a filter, or an approval's snapshot): an id of a message that does not
// exist is then an item of the task, skipped as deleted.
func (r Request) namedIDs() bool {
	return len(r.IDs) > 0 && r.Filter == nil && r.Approval == 0
}

// selection is the filter a request stands for, with the caller's scope.
func (r Request) selection() store.Filter {
	var f store.Filter
	switch {
	case r.Approval > 0:
		// What was counted when the request was made, whatever its
		// filter would match now.
		f = store.Filter{Approval: r.Approval, Status: "all"}
	case r.Filter != nil:
		f = *r.Filter
	default:
		// Ids name messages whatever their status; the ones not pending are
		// settled as skipped with the reason, so the caller sees why.
		f = store.Filter{IDs: r.IDs, Status: "all"}
	}
	// The request's scope narrows whatever scope the filter already has
	// (the HTTP API scopes the filter itself).
	switch {
	case r.Scope == nil:
	case f.Scope == nil:
		f.Scope = r.Scope
	default:
		var both []string
		for _, q := range f.Scope {
			if slices.Contains(r.Scope, q) {
				both = append(both, q)
			}
		}
		f.Scope = append([]string{}, both...)
	}
	return f
}
