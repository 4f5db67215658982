package cleanup

import (
	"testing"
	"time"
)

// FuzzParseSchedule: any text either fails to parse or gives a schedule
// whose ticks behave: the next activation is after the instant, the last
// activation at or before it, and an activation is its own last activation
// (so every instance names a tick the same way).
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
		if last := lastActivation(s, now); last.After(now) {
			t.Fatalf("%q: lastActivation(%s) = %s, after now", spec, now, last)
		}
		if got := lastActivation(s, next); !got.Equal(next) {
			t.Fatalf("%q: lastActivation(%s) = %s, want the activation itself", spec, next, got)
		}
	})
}
