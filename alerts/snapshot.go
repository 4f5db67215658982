package alerts

import (
	"fmt"
	"strconv"
	"time"
)

// Snapshot is what the rules look at, read once per evaluation. The caller
// fills it from the summary table so that reading it stays O(queues).
type Snapshot struct {
	// At is the evaluation time. Every duration in the state machine is
	// measured on it, so take it from one clock for all instances (the
	// database's now()), not from each host. Required.
	At time.Time
	// Queues holds one entry per source queue that has dead messages. A queue
	// missing here counts as all zero, so its firing alerts resolve.
	Queues []QueueStats
	// Capacity is the store's fill level for the capacity rule.
	Capacity CapacityStats
	// Policies holds one entry per configured automatic replay policy. A
	// policy missing here counts as not paused.
	Policies []PolicyStats
	// Approvals holds one entry per request waiting for approval (pending
	// and not expired). A request missing here was decided or expired.
	Approvals []ApprovalStats
}

// PolicyStats is one automatic replay policy.
type PolicyStats struct {
	Name   string
	Paused bool
	// Reason says why it is paused (its canary died again, or who paused
	// it).
	Reason string
}

// ApprovalStats is one request waiting for approval.
type ApprovalStats struct {
	ID          int64
	Action      string
	Count       int64
	RequestedBy string
	ExpiresAt   time.Time
}

// QueueStats are the numbers for one source queue.
type QueueStats struct {
	SourceQueue string
	// Pending is the number of messages with status pending.
	Pending int64
	// OldestPending is the age at Snapshot.At of the oldest pending message,
	// 0 when none is pending.
	OldestPending time.Duration
	// RepeatFailures is the number of pending messages whose replay_count
	// exceeds RepeatFailureReplays.
	RepeatFailures int64
	// NewLast5m is the number of messages that arrived (first or again) in
	// the five minutes before Snapshot.At.
	NewLast5m int64
	// AutoExhausted is the number of pending messages parked by the
	// automatic replay policies (auto_exhausted).
	AutoExhausted int64
}

// CapacityStats is the store's size against its configured caps. A zero
// maximum means "no cap" and never alerts.
type CapacityStats struct {
	Messages, MaxMessages int64
	Bytes, MaxBytes       int64
}

// UsedPercent is the larger of the message and byte fill levels, in percent.
func (c CapacityStats) UsedPercent() float64 {
	var p float64
	if c.MaxMessages > 0 {
		p = max(p, float64(c.Messages)/float64(c.MaxMessages)*100)
	}
	if c.MaxBytes > 0 {
		p = max(p, float64(c.Bytes)/float64(c.MaxBytes)*100)
	}
	return p
}

// measure returns the value a rule of kind k compares for q.
func measure(k Kind, q QueueStats) float64 {
	switch k {
	case KindPendingCount, KindDepthNonzero:
		return float64(q.Pending)
	case KindOldestPendingAge:
		return q.OldestPending.Seconds()
	case KindRepeatFailures:
		return float64(q.RepeatFailures)
	case KindIngestSpike:
		return float64(q.NewLast5m)
	case KindAutoExhausted:
		return float64(q.AutoExhausted)
	}
	return 0
}

// subject is one thing a per-subject rule measures.
type subject struct {
	name, detail string
	value        float64
}

// subjects returns what a per-subject rule of kind k measures in snap.
func subjects(k Kind, snap Snapshot) []subject {
	var out []subject
	switch k {
	case KindPolicyPaused:
		for _, p := range snap.Policies {
			s := subject{name: p.Name}
			if p.Paused {
				s.value, s.detail = 1, p.Reason
			}
			out = append(out, s)
		}
	case KindApprovalPending:
		for _, a := range snap.Approvals {
			out = append(out, subject{name: strconv.FormatInt(a.ID, 10), value: float64(a.Count),
				detail: fmt.Sprintf("%s of %d messages requested by %s, expires %s", a.Action, a.Count, a.RequestedBy,
					a.ExpiresAt.UTC().Format(time.RFC3339))})
		}
	}
	return out
}
