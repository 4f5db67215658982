package promreg

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

func newCounter() *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"l"})
}

func TestRegisterReusesTheRegisteredCollector(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	first, err := Register(reg, newCounter())
	require.NoError(t, err)
	second, err := Register(reg, newCounter())
	require.NoError(t, err)
	require.Same(t, first, second)
	second.WithLabelValues("a").Inc()
	got, err := reg.Gather()
	require.NoError(t, err)
	require.Len(t, got, 1)
	require.Equal(t, 1.0, got[0].GetMetric()[0].GetCounter().GetValue())
}

func TestRegisterNilRegistry(t *testing.T) {
	t.Parallel()
	c := newCounter()
	got, err := Register(nil, c)
	require.NoError(t, err)
	require.Same(t, c, got)
}

func TestRegisterConflict(t *testing.T) {
	t.Parallel()
	reg := prometheus.NewRegistry()
	_, err := Register(reg, newCounter())
	require.NoError(t, err)
	// Same name, other labels: not the same metric, so not shared.
	_, err = Register(reg, prometheus.NewCounterVec(prometheus.CounterOpts{Name: "c_total", Help: "h"}, []string{"other"}))
	require.ErrorContains(t, err, "c_total")
}
