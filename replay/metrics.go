package replay

import (
	"fmt"
	"strconv"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Results of dlq_replays_total.
const (
	resultPublished  = "published"  // confirmed and routed
	resultFailed     = "failed"     // not sent, missing exchange, bad stored data
	resultUnroutable = "unroutable" // returned: no queue bound for it
	resultNacked     = "nacked"     // refused by the broker
	resultUnknown    = "unknown"    // confirm never came
	resultSkipped    = "skipped"    // loop guard, not pending, deleted, never stored
	// resultRepublished counts publishes sent again after an unknown
	// outcome, besides the result each ends with: an unknown outcome that
	// is sent again counts under no other result.
	resultRepublished = "republished"
)

type metrics struct {
	replays    *prometheus.CounterVec
	progress   *prometheus.GaugeVec
	running    prometheus.Gauge
	inFlight   prometheus.Gauge
	recoveries prometheus.Counter

	// progressMu orders gauge updates against the delayed removal of a
	// finished task's gauges; drops holds the pending removals.
	progressMu sync.Mutex
	drops      map[int64]*time.Timer
}

// taskStates are the label values of dlq_replay_task_messages.
var taskStates = []string{"requested", "claimed", "published", "failed", "skipped", "unknown", "remaining", "republished"}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		drops: map[int64]*time.Timer{},
		replays: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "dlq_replays_total",
			Help: "Messages replayed, by result: published (confirmed, routed), unroutable (returned), nacked, failed (not sent), unknown (no confirm, not sent again: may have been delivered), skipped (loop guard, not pending, deleted, never stored); and republished: publishes sent again after an unknown outcome (each also counts under the result it ends with).",
		}, []string{"result"}),
		progress: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dlq_replay_task_messages",
			Help: "Progress of the replay tasks this instance runs, by task and state (requested, claimed, published, failed, skipped, unknown, remaining, republished).",
		}, []string{"task", "state"}),
		running: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlq_replay_tasks_running",
			Help: "Replay tasks this instance runs now.",
		}),
		inFlight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlq_replay_publishes_in_flight",
			Help: "Replayed messages published and awaiting their confirm, on this instance.",
		}),
		recoveries: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "dlq_replay_claims_recovered_total",
			Help: "Replay claims taken back after their lease ran out (their outcome is unknown).",
		}),
	}
	for _, r := range []string{resultPublished, resultFailed, resultUnroutable, resultNacked, resultUnknown, resultSkipped, resultRepublished} {
		m.replays.WithLabelValues(r)
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{m.replays, m.progress, m.running, m.inFlight, m.recoveries} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("replay: register metrics: %w", err)
			}
		}
	}
	return m, nil
}

func (m *metrics) setProgress(t Task) {
	m.progressMu.Lock()
	defer m.progressMu.Unlock()
	m.cancelDrop(t.ID)
	m.set(t)
}

func (m *metrics) set(t Task) {
	id := strconv.FormatInt(t.ID, 10)
	for i, v := range []int64{t.Requested, t.Claimed, t.Published, t.Failed, t.Skipped, t.Unknown, t.Remaining, t.Republished} {
		m.progress.WithLabelValues(id, taskStates[i]).Set(float64(v))
	}
}

// retireProgress sets a finished task's final values and removes its
// gauges after retention: a scrape every minute or so still sees how it
// ended, and the series of old tasks do not pile up. The task running here
// again (resumed) cancels the removal.
func (m *metrics) retireProgress(t Task, retention time.Duration) {
	m.progressMu.Lock()
	defer m.progressMu.Unlock()
	m.cancelDrop(t.ID)
	m.set(t)
	var timer *time.Timer
	timer = time.AfterFunc(retention, func() {
		m.progressMu.Lock()
		defer m.progressMu.Unlock()
		if m.drops[t.ID] == timer {
			delete(m.drops, t.ID)
			m.deleteProgress(t.ID)
		}
	})
	m.drops[t.ID] = timer
}

// dropProgress removes a task's gauges at once (it stopped here without
// finishing: another instance reports it now).
func (m *metrics) dropProgress(id int64) {
	m.progressMu.Lock()
	defer m.progressMu.Unlock()
	m.cancelDrop(id)
	m.deleteProgress(id)
}

func (m *metrics) cancelDrop(id int64) {
	if timer := m.drops[id]; timer != nil {
		timer.Stop()
		delete(m.drops, id)
	}
}

func (m *metrics) deleteProgress(id int64) {
	m.progress.DeletePartialMatch(prometheus.Labels{"task": strconv.FormatInt(id, 10)})
}
