package cron

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/store"
)

// statusCollector exposes the summary on every scrape: per source queue and
// status counts, the oldest pending age, the fill level against the
// capacity caps, and each job's last success. It reads queue_summary, one
// index probe per queue and one per job, so a scrape costs O(queues + jobs)
// whatever the number of stored messages, and every instance exports the
// same numbers (dashboards aggregate with max by (...)).
//
// It belongs to the cron service, not to package cleanup or store: what it
// reports is the state the cron jobs keep — the summary the summary job
// vouches for, the jobs' last successes (it needs their names), and the
// fill level the capacity job holds down — and the service is the one
// component every instance builds, with or without jobs (Disabled), so
// every instance's /metrics has the same series. Cleanup's caps are only
// read.
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
	byCat     *prometheus.Desc
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
		byCat: prometheus.NewDesc("dlq_dead_messages_by_category",
			"Pending dead messages by source queue and failure category (transient, permanent, unknown), from the failure groups.",
			[]string{"source_queue", "category"}, nil),
	}
}

func (c *statusCollector) Describe(ch chan<- *prometheus.Desc) {
	ch <- c.dead
	ch <- c.deadBytes
	ch <- c.oldest
	ch <- c.capacity
	ch <- c.lastOK
	ch <- c.byCat
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
	if cats, err := c.st.PendingByCategory(ctx); err != nil {
		c.warn("cannot count pending messages by category for metrics", err)
	} else {
		for _, n := range cats {
			ch <- prometheus.MustNewConstMetric(c.byCat, prometheus.GaugeValue, float64(n.Pending), n.SourceQueue, n.Category)
		}
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
