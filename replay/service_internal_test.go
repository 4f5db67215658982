package replay

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// An idle runner sleeps until the next task may be taken, at most the poll
// interval, and never spins on a moment already past.
func TestUntilDue(t *testing.T) {
	now := time.Now()
	poll := time.Second
	require.Equal(t, poll, untilDue(now, time.Time{}, poll), "nothing coming: poll")
	require.Equal(t, 300*time.Millisecond, untilDue(now, now.Add(300*time.Millisecond), poll))
	require.Equal(t, poll, untilDue(now, now.Add(time.Hour), poll), "far away: poll meanwhile")
	require.Equal(t, 10*time.Millisecond, untilDue(now, now.Add(-time.Hour), poll), "past: a short pause, not a spin")
	require.Equal(t, 10*time.Millisecond, untilDue(now, now, poll))
}

// A throttled task's pacer spaces messages evenly from the first one on,
// and makes up for a late caller instead of losing the time for good.
func TestPacer(t *testing.T) {
	start := time.Now()
	p := newPacer(100) // burst 10
	require.True(t, p.AllowN(start, 1), "the first message goes at once")
	require.False(t, p.AllowN(start, 1), "no burst at the start")
	require.True(t, p.AllowN(start.Add(10*time.Millisecond), 1), "then one every 10ms")
	require.False(t, p.AllowN(start.Add(15*time.Millisecond), 1))
	// A caller 50ms late sends the 5 messages it owes at once.
	late := start.Add(70 * time.Millisecond)
	require.True(t, p.AllowN(late, 6))
	require.False(t, p.AllowN(late, 1))
	// Never more than a tenth of a second ahead, however long it idled.
	idle := late.Add(time.Hour)
	require.True(t, p.AllowN(idle, 10))
	require.False(t, p.AllowN(idle, 1))
	require.True(t, newPacer(3).AllowN(start, 1), "slow rates: burst 1")
	require.False(t, newPacer(3).AllowN(start, 2))
}
