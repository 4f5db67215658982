package cleanup

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

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
		return nil, fmt.Errorf("cleanup: register metrics: %w", err)
	}
	dur, err := promreg.Register(reg, prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "dlq_job_duration_seconds",
		Help:    "Duration of cron job runs on this instance, by job.",
		Buckets: []float64{.005, .01, .05, .1, .5, 1, 5, 10, 30, 60, 300, 900},
	}, []string{"job"}))
	if err != nil {
		return nil, fmt.Errorf("cleanup: register metrics: %w", err)
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

// workMetrics count what the jobs did.
type workMetrics struct {
	deleted *prometheus.CounterVec
	evicted prometheus.Counter
	repairs prometheus.Counter
}

func newWorkMetrics(reg prometheus.Registerer) (*workMetrics, error) {
	deleted, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_cleanup_deleted_total",
		Help: "Messages deleted by retention cleanup, by the status they had. Capacity evictions are counted in dlq_capacity_evicted_total.",
	}, []string{"status"}))
	if err != nil {
		return nil, fmt.Errorf("cleanup: register metrics: %w", err)
	}
	evicted, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlq_capacity_evicted_total",
		Help: "Messages evicted by the capacity policy (max_messages / max_bytes). Each eviction is also audited.",
	}))
	if err != nil {
		return nil, fmt.Errorf("cleanup: register metrics: %w", err)
	}
	repairs, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlq_summary_repairs_total",
		Help: "queue_summary entries (source queue, status) found wrong by reconciliation and corrected.",
	}))
	if err != nil {
		return nil, fmt.Errorf("cleanup: register metrics: %w", err)
	}
	for _, st := range store.RetentionStatuses {
		deleted.WithLabelValues(st)
	}
	return &workMetrics{deleted: deleted, evicted: evicted, repairs: repairs}, nil
}

// statusCollector exposes the summary on every scrape: per source queue and
// status counts, the oldest pending age, the fill level against the
// capacity caps, and each job's last success. It reads queue_summary, one
// index probe per queue and one per job, so a scrape costs O(queues + jobs)
// whatever the number of stored messages, and every instance exports the
// same numbers (dashboards aggregate with max by (...)).
type statusCollector struct {
	st                    *store.Store
	log                   *slog.Logger
	jobs                  []string
	maxMessages, maxBytes int64
	timeout               time.Duration

	mu        sync.Mutex
	lastWarn  time.Time
	dead      *prometheus.Desc
	deadBytes *prometheus.Desc
	oldest    *prometheus.Desc
	capacity  *prometheus.Desc
	lastOK    *prometheus.Desc
}

func newStatusCollector(st *store.Store, log *slog.Logger, jobs []string, maxMessages, maxBytes int64) *statusCollector {
	return &statusCollector{
		st: st, log: log, jobs: jobs, maxMessages: maxMessages, maxBytes: maxBytes, timeout: 3 * time.Second,
		dead: prometheus.NewDesc("dlq_dead_messages",
			"Stored dead messages by source queue and status, from the summary table.", []string{"source_queue", "status"}, nil),
		deadBytes: prometheus.NewDesc("dlq_dead_message_bytes",
			"Body bytes of stored dead messages by source queue and status, from the summary table.", []string{"source_queue", "status"}, nil),
		oldest: prometheus.NewDesc("dlq_oldest_pending_age_seconds",
			"Age of the oldest pending dead message per source queue (0 when none is pending).", []string{"source_queue"}, nil),
		capacity: prometheus.NewDesc("dlq_capacity_used_ratio",
			"Stored messages or bytes over the configured cap, whichever is fuller (1 = at the cap). Absent when no cap is set.", nil, nil),
		lastOK: prometheus.NewDesc("dlq_job_last_success_timestamp_seconds",
			"When each cron job last finished successfully on any instance (Unix time).", []string{"job"}, nil),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.dead
	ch <- c.deadBytes
	ch <- c.oldest
	ch <- c.capacity
	ch <- c.lastOK
}

func (c *statusCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), c.timeout)
	defer cancel()
	// The two reads go to the database at once, on two connections: a
	// scrape then waits for the slower one, not for both in turn. (On a
	// quiet machine the difference is within noise: docs/BENCHMARKS.md.)
	type successes struct {
		at  map[string]time.Time
		err error
	}
	lastCh := make(chan successes, 1)
	if len(c.jobs) > 0 {
		go func() {
			at, err := c.st.LastJobSuccesses(ctx, c.jobs)
			lastCh <- successes{at, err}
		}()
	}
	rep, err := c.st.QueueStatus(ctx, nil)
	if err != nil {
		// The rest of /metrics (dlq_up above all) must still be served
		// while PostgreSQL is away; these series are simply absent.
		c.warn("cannot read queue summary for metrics", err)
	} else {
		var total store.StatusCount
		for _, q := range rep.Queues {
			for st, n := range q.ByStatus {
				ch <- prometheus.MustNewConstMetric(c.dead, prometheus.GaugeValue, float64(n.Messages), q.SourceQueue, st)
				ch <- prometheus.MustNewConstMetric(c.deadBytes, prometheus.GaugeValue, float64(n.Bytes), q.SourceQueue, st)
			}
			total.Messages += q.Messages
			total.Bytes += q.Bytes
			age := 0.0
			if q.OldestPendingAt != nil {
				age = max(rep.At.Sub(*q.OldestPendingAt).Seconds(), 0)
			}
			ch <- prometheus.MustNewConstMetric(c.oldest, prometheus.GaugeValue, age, q.SourceQueue)
		}
		if c.maxMessages > 0 || c.maxBytes > 0 {
			ch <- prometheus.MustNewConstMetric(c.capacity, prometheus.GaugeValue, usedRatio(total, c.maxMessages, c.maxBytes))
		}
	}
	if len(c.jobs) == 0 {
		return
	}
	last := <-lastCh
	if last.err != nil {
		c.warn("cannot read last job successes for metrics", last.err)
		return
	}
	for job, at := range last.at {
		ch <- prometheus.MustNewConstMetric(c.lastOK, prometheus.GaugeValue, float64(at.UnixNano())/1e9, job)
	}
}

// warn logs at most once a minute: scrapes come every few seconds.
func (c *statusCollector) warn(msg string, err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if time.Since(c.lastWarn) < time.Minute {
		return
	}
	c.lastWarn = time.Now()
	c.log.Warn(msg, "error", err)
}

// usedRatio is the fuller of messages/maxMessages and bytes/maxBytes; a
// zero cap does not count.
func usedRatio(total store.StatusCount, maxMessages, maxBytes int64) float64 {
	var r float64
	if maxMessages > 0 {
		r = max(r, float64(total.Messages)/float64(maxMessages))
	}
	if maxBytes > 0 {
		r = max(r, float64(total.Bytes)/float64(maxBytes))
	}
	return r
}
