package cli

import (
	"bytes"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// A replay --wait that published nothing because it skipped every message
// exits 1 and says, per skip reason, what to do: --force past the loop
// guard, dlq show for one no longer pending; a reason it has no advice for
// is still printed. One that published some and skipped some exits 0 but
// still tells why the rest were skipped.
func TestFinishedReplaySaysWhyItSkipped(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		name    string
		task    replay.Task
		code    int
		say     []string
		sayNone bool
	}{
		{"loop guard", replay.Task{ID: 4, Status: replay.StatusCompleted, Outcome: replay.OutcomeNonePublished, Requested: 1,
			Skipped: 1, SkipReasons: map[string]int64{store.SkipMaxReplays: 1}}, ExitFailure,
			[]string{"skipped 1 (max_replays)", "--force", "published none of its 1 messages"}, false},
		{"acknowledged", replay.Task{ID: 5, Status: replay.StatusCompleted, Outcome: replay.OutcomeNonePublished, Requested: 1,
			Skipped: 1, SkipReasons: map[string]int64{store.SkipNotPending: 1}}, ExitFailure,
			[]string{"skipped 1 (not_pending)", "dlq show"}, false},
		{"some published", replay.Task{ID: 6, Status: replay.StatusCompleted, Outcome: replay.OutcomePartial, Requested: 3,
			Published: 2, Skipped: 1, SkipReasons: map[string]int64{"future_reason": 1}}, ExitOK,
			[]string{"skipped 1 (future_reason)"}, true},
		{"all published", replay.Task{ID: 7, Status: replay.StatusCompleted, Outcome: replay.OutcomeAllPublished, Requested: 3,
			Published: 3}, ExitOK, nil, true},
	} {
		var w bytes.Buffer
		require.Equal(t, c.code, finishedTask(&w, c.task), "%s: %s", c.name, w.String())
		for _, s := range c.say {
			require.Contains(t, w.String(), s, c.name)
		}
		if c.sayNone {
			require.NotContains(t, w.String(), "published none", c.name)
		}
	}
}
