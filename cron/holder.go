package cron

import (
	"time"

	"github.com/dlq/dlq/store"
)

// Holder is who holds a cron job, as the console's jobs page and dlq jobs
// both say it. A lease outlives its runs by its TTL and then expires:
// between runs an expired lease is the normal state of a job, not a
// fault. Only a run still marked running whose lease expired (its holder
// stopped renewing it: died, restarted, paused) is one.
type Holder struct {
	// State is "running" (a run holds the lease), "stalled" (the latest
	// run is marked running but its lease expired: store.JobRuns shows it
	// lease_lost), "idle" (no run; Held says whether the holder's lease
	// is still live) or "" (the job never ran).
	State  string
	Holder string
	Token  int64
	Held   bool
	// ExpiresAt is when the lease expires, or expired.
	ExpiresAt time.Time
}

// Holder reads a job's holder from its lease and its latest run.
func (j JobView) Holder() Holder {
	l := j.Lease
	if l == nil {
		return Holder{}
	}
	h := Holder{State: "idle", Holder: l.Holder, Token: l.Token, Held: l.Held, ExpiresAt: l.ExpiresAt}
	if len(j.Runs) == 0 || j.Runs[0].Token != l.Token {
		return h
	}
	switch last := j.Runs[0]; {
	case last.Outcome == store.JobRunning && l.Held:
		h.State = "running"
	case last.Outcome == store.JobLeaseLost && !l.Held:
		h.State = "stalled"
	}
	return h
}
