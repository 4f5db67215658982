package cron

import (
	"context"
	"time"

	"github.com/dlq/dlq/store"
)

// JobsView is what GET /api/v1/jobs shows.
type JobsView struct {
	// Instance is the instance that answered.
	Instance string    `json:"instance"`
	Jobs     []JobView `json:"jobs"`
}

// JobView is one job: its schedule, who holds it, and its recent runs.
type JobView struct {
	Name string `json:"name"`
	// Schedule is the configured schedule, "off" when disabled.
	Schedule string `json:"schedule"`
	// Lease is the current (or last) holder; null if it never ran.
	Lease *store.JobLease `json:"lease"`
	// LastSuccessAt is when a run last succeeded, on any instance.
	LastSuccessAt *time.Time `json:"last_success_at"`
	// Runs are the most recent runs, newest first.
	Runs []store.JobRun `json:"runs"`
}

// RecentRunsPerJob is how many runs JobsView lists per job.
const RecentRunsPerJob = 10

// Jobs returns every job with its lease, last success and recent runs.
func (s *Service) Jobs(ctx context.Context) (JobsView, error) {
	st := s.cfg.Store
	leases, err := st.JobLeases(ctx)
	if err != nil {
		return JobsView{}, err
	}
	byJob := map[string]store.JobLease{}
	for _, l := range leases {
		byJob[l.Job] = l
	}
	scheds := s.cfg.Schedules.byJob()
	names := make([]string, 0, len(scheds))
	for _, sc := range scheds {
		names = append(names, sc.job)
	}
	last, err := st.LastJobSuccesses(ctx, names)
	if err != nil {
		return JobsView{}, err
	}
	out := JobsView{Instance: s.Instance(), Jobs: make([]JobView, 0, len(scheds))}
	for _, sc := range scheds {
		v := JobView{Name: sc.job, Schedule: s.schedule(sc.spec)}
		if l, ok := byJob[sc.job]; ok {
			v.Lease = &l
		}
		if t, ok := last[sc.job]; ok {
			v.LastSuccessAt = &t
		}
		if v.Runs, err = st.JobRuns(ctx, sc.job, RecentRunsPerJob); err != nil {
			return JobsView{}, err
		}
		if v.Runs == nil {
			v.Runs = []store.JobRun{}
		}
		out.Jobs = append(out.Jobs, v)
	}
	return out, nil
}
