package cron

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// jobMetrics count the scheduler's runs on this instance.
type jobMetrics struct {
	runs     *prometheus.CounterVec
	duration *prometheus.HistogramVec
}

var jobOutcomes = []string{store.JobSuccess, store.JobFailure, store.JobLeaseLost, store.JobSkipped}

func newJobMetrics(reg prometheus.Registerer, jobs []string) (*jobMetrics, error) {
	runs, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_job_runs_total",
		Help: "Cron job runs on this instance by job and outcome (success, failure, lease_lost, skipped: a tick this instance claimed while the previous run was still going, replaced by a later tick). A panic is a failure.",
	}, []string{"job", "outcome"}))
	if err != nil {
		return nil, err
	}
	dur, err := promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dlq_job_duration_seconds",
		Help:    "Duration of cron job runs on this instance, by job.",
		Buckets: []float64{.005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900},
	}, []string{"job"}))
	if err != nil {
		return nil, err
	}
	for _, j := range jobs {
		for _, o := range jobOutcomes {
			runs.WithLabelValues(j, o)
		}
		dur.WithLabelValues(j)
	}
	return &jobMetrics{runs: runs, duration: dur}, nil
}

func (m *jobMetrics) observe(job, outcome string, d time.Duration) {
	m.runs.WithLabelValues(job, outcome).Inc()
	m.duration.WithLabelValues(job).Observe(d.Seconds())
}
