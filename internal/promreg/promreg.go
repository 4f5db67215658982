// Package promreg registers dlq's collectors so that two components built
// on one registry (two consumers, two dispatchers, a test building a
// component twice) share one set of series instead of failing or counting
// into a collector nobody scrapes.
package promreg

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

// Register registers c on reg and returns it, or returns the collector
// already registered under the same descriptors when it has c's type. A nil
// reg registers nothing and returns c. Any other refusal (a name reused with
// other labels or help) is returned as the registry's error, which names the
// metric.
func Register[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	if reg == nil {
		return c, nil
	}
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	if are, ok := errors.AsType[prometheus.AlreadyRegisteredError](err); ok {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}
