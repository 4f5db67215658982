package cleanup

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/store"
)

// metrics count what retention and the capacity policy deleted.
type metrics struct {
	deleted *prometheus.CounterVec
	evicted prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	deleted, err := register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_cleanup_deleted_total",
		Help: "Messages deleted by retention cleanup, by the status they had. Capacity evictions are counted in dlq_capacity_evicted_total.",
	}, []string{"status"}))
	if err != nil {
		return nil, err
	}
	evicted, err := register(reg, prometheus.NewCounter(prometheus.CounterOpts{
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

// register registers c on reg (when reg is not nil), reusing a collector
// already registered under the same descriptors, so that several
// Cleaners over one registry (tests, benchmarks) count together.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing, nil
			}
		}
		return c, fmt.Errorf("cleanup: register metrics: %w", err)
	}
	return c, nil
}
