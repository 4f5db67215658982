package cleanup

import (
	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
	"github.com/dlq/dlq/store"
)

// metrics count what retention and the capacity policy deleted.
type metrics struct {
	deleted *prometheus.CounterVec
	evicted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	deleted, err := promreg.Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_cleanup_deleted_total",
		Help: "Messages deleted by retention cleanup, by the status they had. Capacity evictions are counted in dlq_capacity_evicted_total.",
	}, []string{"status"}))
	if err != nil {
		return nil, err
	}
	evicted, err := promreg.Register(reg, prometheus.NewCounter(prometheus.CounterOpts{
		Name: "dlq_capacity_evicted_total",
		Help: "Messages evicted by the capacity policy (max_messages / max_bytes). Each eviction is also audited.",
	}))
	if err != nil {
		return nil, err
	}
	for _, st := range store.RetentionStatuses {
		deleted.WithLabelValues(st)
	}
	return &metrics{deleted: deleted, evicted: evicted}, nil
}
