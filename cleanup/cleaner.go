package cleanup

import (
	"time"
)

// Cleaner does the work of the cron jobs cleanup (DeleteExpired) and
// capacity (EnforceCapacity); package cron schedules them. It keeps no
// state between calls: every write goes to the store under the lease the
// caller passes, so a call by an instance that lost its job's lease changes
// nothing.
type Cleaner struct {
	cfg      Config
	metrics  *metrics
	expiries []Expiry
}

// New checks cfg and registers the metrics.
func New(cfg Config) (*Cleaner, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	m, err := newMetrics(cfg.Registerer)
	if err != nil {
		return nil, err
	}
	return &Cleaner{cfg: cfg, metrics: m, expiries: expiries(cfg, time.Now)}, nil
}

// Capacity is the capacity policy in force: its caps are what the fill
// level and the capacity alert rule measure against.
func (c *Cleaner) Capacity() Capacity { return c.cfg.Capacity }
