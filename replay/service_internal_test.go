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
