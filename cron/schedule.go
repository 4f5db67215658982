package cron

import (
	"errors"
	"fmt"
	"strings"
	"time"

	robfig "github.com/robfig/cron/v3"
)

// ScheduleOff disables a job.
const ScheduleOff = "off"

// ParseSchedule reads a job schedule: a five-field cron expression
// ("*/5 * * * *", evaluated in UTC unless prefixed with CRON_TZ=Area/City),
// a descriptor (@hourly, @daily, ...), or "@every <duration>".
//
// "@every" is handled here rather than by the cron library, whose version
// rounds to whole seconds and counts from each process's start. Ours is
// aligned to the Unix epoch: every instance computes the same time slots,
// which is what lets job_runs name a tick that all instances agree on.
func ParseSchedule(spec string) (robfig.Schedule, error) {
	spec = strings.TrimSpace(spec)
	if rest, ok := strings.CutPrefix(spec, "@every "); ok {
		d, err := time.ParseDuration(strings.TrimSpace(rest))
		if err != nil {
			return nil, fmt.Errorf("schedule %q: %w", spec, err)
		}
		if d < 10*time.Millisecond {
			return nil, fmt.Errorf("schedule %q: the interval must be at least 10ms", spec)
		}
		return everySchedule{d}, nil
	}
	if spec == "" {
		return nil, errors.New("schedule is empty")
	}
	s, err := parseStandard(spec)
	if err != nil {
		return nil, fmt.Errorf("schedule %q is neither a cron expression (minute hour day month weekday), a descriptor such as @hourly, nor @every <duration>: %w", spec, err)
	}
	if s.Next(time.Now().UTC()).IsZero() {
		return nil, fmt.Errorf("schedule %q never fires", spec)
	}
	return s, nil
}

// parseStandard is the library's ParseStandard without its panics: the library
// indexes past the end of "TZ=Zone" given with no fields after it.
func parseStandard(spec string) (s robfig.Schedule, err error) {
	defer func() {
		if r := recover(); r != nil {
			s, err = nil, fmt.Errorf("unparseable: %v", r)
		}
	}()
	return robfig.ParseStandard(spec)
}

// everySchedule fires at every multiple of d since the Unix epoch.
type everySchedule struct{ d time.Duration }

func (e everySchedule) Next(t time.Time) time.Time {
	return time.Unix(0, (t.UnixNano()/int64(e.d)+1)*int64(e.d)).In(t.Location())
}

// interval estimates the time between two activations of s after now.
func interval(s robfig.Schedule, now time.Time) time.Duration {
	if e, ok := s.(everySchedule); ok {
		return e.d
	}
	next := s.Next(now)
	return s.Next(next).Sub(next)
}

// ScheduleInterval is the time between two activations of spec (0 for
// "off" or an invalid spec), e.g. to tell Alertmanager notifiers how often
// alerts are evaluated.
func ScheduleInterval(spec string) time.Duration {
	s, err := ParseSchedule(spec)
	if err != nil {
		return 0
	}
	return interval(s, time.Now().UTC())
}
