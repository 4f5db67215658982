package alerts

import (
	"context"
	"errors"
	"log/slog"
)

// LogNotifier writes every notification to the log. The Dispatcher always
// includes one, so an alert is never only in a receiver that may be down.
type LogNotifier struct {
	logger *slog.Logger
}

// NewLogNotifier returns a LogNotifier writing to logger (Required).
func NewLogNotifier(logger *slog.Logger) (*LogNotifier, error) {
	if logger == nil {
		return nil, errors.New("alerts: log notifier: logger: required")
	}
	return &LogNotifier{logger: logger}, nil
}

// Name implements Notifier.
func (*LogNotifier) Name() string { return "log" }

// Notify implements Notifier. Firing alerts are logged at warn level so they
// stand out; resolutions at info. It never fails.
func (n *LogNotifier) Notify(ctx context.Context, alerts ...Alert) (bool, error) {
	for _, a := range alerts {
		level := slog.LevelWarn
		if a.Status == StatusResolved {
			level = slog.LevelInfo
		}
		attrs := []slog.Attr{
			slog.String("rule", a.Rule),
			slog.String("status", string(a.Status)),
			slog.String("severity", a.Severity),
			slog.Float64("value", a.Value),
			slog.Float64("threshold", a.Threshold),
			slog.Time("starts_at", a.StartsAt),
		}
		if a.SourceQueue != "" {
			attrs = append(attrs, slog.String("source_queue", a.SourceQueue))
		}
		if a.Subject != "" {
			attrs = append(attrs, slog.String("subject", a.Subject))
		}
		if !a.EndsAt.IsZero() {
			attrs = append(attrs, slog.Time("ends_at", a.EndsAt))
		}
		if u := a.Annotations[AnnotationRunbookURL]; u != "" {
			attrs = append(attrs, slog.String("runbook_url", u))
		}
		n.logger.LogAttrs(ctx, level, "alert "+string(a.Status)+": "+a.Annotations[AnnotationSummary], attrs...)
	}
	return false, nil
}
