package alerts

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/dlq/dlq/internal/promreg"
)

// Retry defaults of the Dispatcher. With these a delivery is tried for about
// 7.5 s (waits of 0.5, 1, 2 and 4 s) before it is given up.
const (
	MaxAttemptsDefault    = 5
	InitialBackoffDefault = 500 * time.Millisecond
	MaxBackoffDefault     = 30 * time.Second
)

// Results counted in dlq_alert_notifications_total.
const (
	ResultSuccess = "success"
	// ResultRetry counts a failed attempt that will be tried again.
	ResultRetry = "retry"
	// ResultFailure counts a delivery given up: not retryable, out of
	// attempts, or cancelled.
	ResultFailure = "failure"
)

// DispatcherConfig configures a Dispatcher.
type DispatcherConfig struct {
	// Logger receives delivery problems and, through the built-in
	// LogNotifier, every alert. Required.
	Logger *slog.Logger
	// Registerer receives dlq_alerts_firing and
	// dlq_alert_notifications_total. Required.
	Registerer prometheus.Registerer
	// Notifiers are the receivers besides the log, which is always added.
	// Names must be unique and not "log". Optional.
	Notifiers []Notifier
	// RuleNames get a dlq_alerts_firing{rule} series at 0 from the start, so
	// "no alert firing" is a visible zero rather than an absent series.
	// Optional, default the names of DefaultRules.
	RuleNames []string
	// States, when set, is where dlq_alerts_firing comes from at scrape
	// time: the state the last evaluation saved, on whichever instance,
	// rather than only what this instance last evaluated (SetFiring). Every
	// instance then reports the same values. Optional.
	States StateLoader
	// MaxAttempts bounds the tries of one delivery, including the first.
	// Optional, default MaxAttemptsDefault.
	MaxAttempts int
	// InitialBackoff is the wait after the first failed attempt; each later
	// wait doubles, up to MaxBackoff. Optional, defaults
	// InitialBackoffDefault and MaxBackoffDefault.
	InitialBackoff time.Duration
	MaxBackoff     time.Duration
}

func (c *DispatcherConfig) setDefaults() {
	c.MaxAttempts = cmp.Or(c.MaxAttempts, MaxAttemptsDefault)
	c.InitialBackoff = cmp.Or(c.InitialBackoff, InitialBackoffDefault)
	c.MaxBackoff = cmp.Or(c.MaxBackoff, MaxBackoffDefault)
	if c.RuleNames == nil {
		for _, r := range DefaultRules() {
			c.RuleNames = append(c.RuleNames, r.Name)
		}
	}
}

func (c *DispatcherConfig) validate() error {
	if c.Logger == nil {
		return errors.New("logger: required")
	}
	if c.Registerer == nil {
		return errors.New("registerer: required")
	}
	if c.MaxAttempts < 1 {
		return fmt.Errorf("max_attempts: must be >= 1, got %d", c.MaxAttempts)
	}
	if c.InitialBackoff < 0 || c.MaxBackoff < c.InitialBackoff {
		return fmt.Errorf("initial_backoff, max_backoff: need 0 <= initial_backoff <= max_backoff, got %s and %s", c.InitialBackoff, c.MaxBackoff)
	}
	seen := map[string]bool{"log": true}
	for i, n := range c.Notifiers {
		if n == nil {
			return fmt.Errorf("notifiers[%d]: is nil", i)
		}
		if seen[n.Name()] {
			return fmt.Errorf("notifiers[%d]: name %q is already used", i, n.Name())
		}
		seen[n.Name()] = true
	}
	return nil
}

// Dispatcher delivers an evaluation's notifications to every notifier at
// once, retrying each with exponential backoff while the notifier says the
// failure is retryable, and keeps the alert metrics.
type Dispatcher struct {
	logger        *slog.Logger
	notifiers     []Notifier
	maxAttempts   int
	initial, max  time.Duration
	firing        *firingGauge
	notifications *prometheus.CounterVec

	// undelivered holds, per notifier, the notifications of deliveries
	// given up while the failure was retryable (the receiver was down
	// longer than the retries last): the next Dispatch sends them first.
	// The alert state is saved before the delivery, so nothing else would
	// send them again: a fire would wait for its repeat interval, a
	// resolve would never come. Lost only if this process stops.
	mu          sync.Mutex
	undelivered map[string][]Alert
}

// UndeliveredMax bounds the notifications kept per notifier for the next
// evaluation; the oldest go first beyond it.
const UndeliveredMax = 1000

// NewDispatcher checks cfg, registers the metrics and returns the
// Dispatcher. Registering twice on one registry reuses the first metrics.
func NewDispatcher(cfg DispatcherConfig) (*Dispatcher, error) {
	cfg.setDefaults()
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("alerts: dispatcher config: %w", err)
	}
	logN, err := NewLogNotifier(cfg.Logger)
	if err != nil {
		return nil, err
	}
	d := &Dispatcher{
		logger:      cfg.Logger,
		notifiers:   append([]Notifier{logN}, cfg.Notifiers...),
		maxAttempts: cfg.MaxAttempts,
		initial:     cfg.InitialBackoff,
		max:         cfg.MaxBackoff,
		undelivered: map[string][]Alert{},
	}
	d.firing, err = promreg.Register(cfg.Registerer, newFiringGauge())
	if err != nil {
		return nil, fmt.Errorf("alerts: register metrics: %w", err)
	}
	d.notifications, err = promreg.Register(cfg.Registerer, prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "dlq_alert_notifications_total",
		Help: "Alert deliveries by notifier and result: success, retry (a failed attempt that will be tried again) or failure (given up).",
	}, []string{"notifier", "result"}))
	if err != nil {
		return nil, fmt.Errorf("alerts: register metrics: %w", err)
	}
	d.firing.setup(cfg.RuleNames, cfg.States, cfg.Logger)
	for _, n := range d.notifiers {
		for _, r := range []string{ResultSuccess, ResultRetry, ResultFailure} {
			d.notifications.WithLabelValues(n.Name(), r)
		}
	}
	return d, nil
}

// SetFiring sets dlq_alerts_firing{rule} from s, the state this instance
// just evaluated and saved: the number of firing pairs per rule, 0 for
// every rule known so far that has none. (With DispatcherConfig.States,
// scrapes keep it in step with evaluations on other instances.)
func (d *Dispatcher) SetFiring(s State) {
	d.firing.set(s, false)
}

// Dispatch sends notifications (from Evaluate) to every notifier in
// parallel. Refresher notifiers also get every firing alert of next. It
// returns when every delivery succeeded or was given up, joining the errors
// of those given up. Notifiers with nothing to send are not called.
func (d *Dispatcher) Dispatch(ctx context.Context, next State, notifications []Alert) error {
	errs := make([]error, len(d.notifiers))
	var wg sync.WaitGroup
	for i, n := range d.notifiers {
		notes := d.takeUndelivered(n.Name(), notifications)
		batch := notes
		if r, ok := n.(Refresher); ok && r.RefreshFiring() {
			batch = withFiring(notes, next.Firing())
		}
		if len(batch) == 0 {
			continue
		}
		wg.Go(func() {
			var keep bool
			if keep, errs[i] = d.deliver(ctx, n, batch); keep {
				d.keepUndelivered(n.Name(), notes)
			}
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// withFiring returns notes plus every firing alert not already in notes.
func withFiring(notes, firing []Alert) []Alert {
	out := append(make([]Alert, 0, len(notes)+len(firing)), notes...)
	have := make(map[stateKey]bool, len(notes))
	for _, a := range notes {
		have[stateKey{a.Rule, a.SourceQueue, a.Subject}] = true
	}
	for _, a := range firing {
		if !have[stateKey{a.Rule, a.SourceQueue, a.Subject}] {
			out = append(out, a)
		}
	}
	sortAlerts(out)
	return out
}

// takeUndelivered returns the notifications kept for notifier name,
// oldest first, followed by notes, and forgets them.
func (d *Dispatcher) takeUndelivered(name string, notes []Alert) []Alert {
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := d.undelivered[name]
	if len(kept) == 0 {
		return notes
	}
	delete(d.undelivered, name)
	return append(kept, notes...)
}

// keepUndelivered keeps notes for notifier name's next delivery.
func (d *Dispatcher) keepUndelivered(name string, notes []Alert) {
	if len(notes) == 0 {
		return
	}
	d.mu.Lock()
	defer d.mu.Unlock()
	kept := append(d.undelivered[name], notes...)
	if drop := len(kept) - UndeliveredMax; drop > 0 {
		d.logger.Error("alert notifications dropped: the receiver has been failing too long", "notifier", name, "dropped", drop)
		kept = kept[drop:]
	}
	d.undelivered[name] = kept
}

// deliver sends alerts to n, retrying with backoff. keep says that it was
// given up while the failure was retryable (out of attempts, or cancelled),
// so that the next evaluation should send them again.
func (d *Dispatcher) deliver(ctx context.Context, n Notifier, alerts []Alert) (keep bool, err error) {
	name := n.Name()
	wait := d.initial
	for attempt := 1; ; attempt++ {
		retryable, err := n.Notify(ctx, alerts...)
		if err == nil {
			d.notifications.WithLabelValues(name, ResultSuccess).Inc()
			return false, nil
		}
		giveUp := ""
		switch {
		case ctx.Err() != nil:
			giveUp = "cancelled"
		case !retryable:
			giveUp = "not retryable"
		case attempt >= d.maxAttempts:
			giveUp = "out of attempts"
		}
		if giveUp != "" {
			d.notifications.WithLabelValues(name, ResultFailure).Inc()
			if ctx.Err() != nil {
				// Cancelled during the attempt or just after it: the
				// caller learns it was cancelled, as during a backoff.
				err = errors.Join(err, context.Cause(ctx))
			}
			err = fmt.Errorf("alerts: notify %s (%d alerts) gave up after attempt %d, %s: %w", name, len(alerts), attempt, giveUp, err)
			if ctx.Err() == nil {
				d.logger.Error("alert notification failed", "notifier", name, "alerts", len(alerts), "attempt", attempt, "error", err)
			}
			return giveUp != "not retryable", err
		}
		d.notifications.WithLabelValues(name, ResultRetry).Inc()
		d.logger.Warn("alert notification failed, retrying", "notifier", name, "alerts", len(alerts),
			"attempt", attempt, "retry_in", wait, "error", err)
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			d.notifications.WithLabelValues(name, ResultFailure).Inc()
			return true, fmt.Errorf("alerts: notify %s (%d alerts) cancelled while waiting to retry after attempt %d: %w", name, len(alerts), attempt, errors.Join(err, context.Cause(ctx)))
		case <-t.C:
		}
		wait = min(wait*2, d.max)
	}
}
