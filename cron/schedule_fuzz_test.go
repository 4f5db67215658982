package cron

import (
	"testing"
	"time"
)

// FuzzParseSchedule: any text either fails to parse or gives a schedule
// whose ticks behave: the next activation is after the instant, the one
// after it later still, and an activation is the next one from any instant
// just before it (so every instance names a tick the same way, whenever its
// cron loop asked).
func FuzzParseSchedule(f *testing.F) {
	for _, s := range []string{"@every 200ms", "@every 1h30m", "*/5 * * * *", "0 3 * * 1-5", "@daily", "CRON_TZ=Europe/Berlin 0 3 * * *", "TZ=UTC", "@every 0s", "61 * * * *"} {
		f.Add(s, int64(1_700_000_000_123_456_789))
	}
	f.Fuzz(func(t *testing.T, spec string, nanos int64) {
		s, err := ParseSchedule(spec)
		if err != nil {
			return
		}
		now := time.Unix(0, nanos%(4_000_000_000*int64(time.Second))).UTC()
		if nanos < 0 {
			now = time.Unix(0, -(nanos % (4_000_000_000 * int64(time.Second)))).UTC()
		}
		next := s.Next(now)
		if next.IsZero() {
			return // a schedule that never fires again from here (e.g. 30 February)
		}
		if !next.After(now) {
			t.Fatalf("%q: Next(%s) = %s, not after", spec, now, next)
		}
		if after := s.Next(next); !after.IsZero() && !after.After(next) {
			t.Fatalf("%q: Next(%s) = %s, not after", spec, next, after)
		}
		if got := s.Next(next.Add(-time.Nanosecond)); !got.Equal(next) {
			t.Fatalf("%q: Next(%s) = %s, want %s", spec, next.Add(-time.Nanosecond), got, next)
		}
	})
}
