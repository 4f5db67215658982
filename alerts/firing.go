package alerts

import (
	"context"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// StateLoader reads the alert state the last evaluation saved, on
// whichever instance it ran. A StateStore is one.
type StateLoader interface {
	LoadAlertState(ctx context.Context) (State, error)
}

// Reading the saved state for dlq_alerts_firing: at most once per
// firingRefresh however many scrapes come, each read bounded by
// firingLoadTimeout.
const (
	firingRefresh     = time.Second
	firingLoadTimeout = 3 * time.Second
)

// firingGauge is dlq_alerts_firing{rule}. The alert job runs on one
// instance per tick, and the lease moves between instances; a gauge set
// only by the instance that evaluated would stay, on every other one, at
// what that one last saw (a resolved alert still firing for a dashboard's
// max by (rule)). With a loader, each scrape reports the saved state
// instead, read from the store (one row) unless this instance evaluated or
// read it within firingRefresh, so every instance, with or without the job,
// reports the same numbers.
//
// A stale state (State.Stale: nobody has evaluated alerts for several
// ticks) reports 0 for every rule, and dlq_alerts_stale 1: its alerts are
// not known to fire any more, and a firing series that never changes would
// say they are. Staleness is judged at each scrape on this host's clock,
// so it shows even while the store cannot be read.
type firingGauge struct {
	*prometheus.GaugeVec
	stale prometheus.Gauge

	mu        sync.Mutex
	ruleNames map[string]bool // every rule ever given a series
	// shown is the state reported; freshAt when it was evaluated here or
	// read.
	shown    State
	freshAt  time.Time
	loader   StateLoader
	logger   *slog.Logger
	lastWarn time.Time

	// loading makes concurrent scrapes share one read.
	loading sync.Mutex
}

func newFiringGauge() *firingGauge {
	return &firingGauge{
		GaugeVec: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "dlq_alerts_firing",
			Help: "Alerts currently firing, by rule (one per source queue, policy or approval request, one for global rules).",
		}, []string{"rule"}),
		stale: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "dlq_alerts_stale",
			Help: "1 when the saved alert state is stale: no instance has evaluated alerts for several ticks of the alerts job's schedule (job off or not running), so no alert is reported firing.",
		}),
		ruleNames: map[string]bool{},
	}
}

// setup gives the gauge its zero series and, unless it has one already (a
// second Dispatcher on one registry), its loader.
func (g *firingGauge) setup(ruleNames []string, loader StateLoader, logger *slog.Logger) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, name := range ruleNames {
		g.WithLabelValues(name)
		g.ruleNames[name] = true
	}
	if g.loader == nil && loader != nil {
		g.loader, g.logger = loader, logger
	}
}

// set shows s. A state read from the store (loaded) is shown only when it
// is not older than the one shown: a read that began before this
// instance's own evaluation saved must not undo it.
func (g *firingGauge) set(s State, loaded bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.freshAt = time.Now()
	if loaded && s.EvaluatedAt.Before(g.shown.EvaluatedAt) {
		return
	}
	g.shown = s
	g.apply(time.Now())
}

// apply sets the series from the state shown, as it stands at now. g.mu
// must be held.
func (g *firingGauge) apply(now time.Time) {
	counts := map[string]int{}
	stale := g.shown.Stale(now)
	if stale {
		g.stale.Set(1)
	} else {
		g.stale.Set(0)
		counts = g.shown.FiringCount()
	}
	for name := range counts {
		g.ruleNames[name] = true
	}
	for name := range g.ruleNames {
		g.WithLabelValues(name).Set(float64(counts[name]))
	}
}

// Describe describes both gauges.
func (g *firingGauge) Describe(ch chan<- *prometheus.Desc) {
	g.GaugeVec.Describe(ch)
	g.stale.Describe(ch)
}

// Collect refreshes the gauge from the saved state when it is not fresh,
// then reports it as it stands now (stale or not). When the store cannot
// be read, the last state read stays (and a warning is logged, at most
// once a minute).
func (g *firingGauge) Collect(ch chan<- prometheus.Metric) {
	g.refresh()
	g.mu.Lock()
	g.apply(time.Now())
	g.mu.Unlock()
	g.GaugeVec.Collect(ch)
	g.stale.Collect(ch)
}

func (g *firingGauge) refresh() {
	g.loading.Lock()
	defer g.loading.Unlock()
	g.mu.Lock()
	loader, fresh := g.loader, time.Since(g.freshAt) < firingRefresh
	g.mu.Unlock()
	if loader == nil || fresh {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), firingLoadTimeout)
	defer cancel()
	s, err := loader.LoadAlertState(ctx)
	if err == nil {
		g.set(s, true)
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if time.Since(g.lastWarn) >= time.Minute {
		g.lastWarn = time.Now()
		g.logger.Warn("cannot read the saved alert state for dlq_alerts_firing; it shows the last state read", "error", err)
	}
}
