package replay_test

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
)

func TestTaskOutcome(t *testing.T) {
	t.Parallel()
	for _, c := range []struct {
		status                                string
		published, failed, unknown, remaining int64
		want                                  string
	}{
		{replay.StatusRunning, 5, 0, 0, 3, ""},
		{replay.StatusScheduled, 0, 0, 0, 3, ""},
		{replay.StatusCanaryWait, 2, 0, 0, 3, ""},
		{replay.StatusCompleted, 5, 0, 0, 0, replay.OutcomeAllPublished},
		{replay.StatusCompleted, 0, 2, 0, 0, replay.OutcomeNonePublished}, // every publish failed: not a success
		{replay.StatusCompleted, 0, 0, 2, 0, replay.OutcomeNonePublished}, // unknown is not published
		{replay.StatusCompleted, 0, 0, 0, 0, replay.OutcomeNonePublished}, // everything skipped
		{replay.StatusCompleted, 3, 1, 0, 0, replay.OutcomePartial},
		{replay.StatusCompleted, 3, 0, 1, 0, replay.OutcomePartial},
		{replay.StatusCancelled, 3, 0, 0, 7, replay.OutcomePartial}, // stopped before the end
		{replay.StatusCancelled, 0, 0, 0, 7, replay.OutcomeNonePublished},
		{replay.StatusCanaryFailed, 2, 0, 0, 8, replay.OutcomePartial},
		{replay.StatusFailed, 4, 0, 0, 0, replay.OutcomeAllPublished},
	} {
		require.Equal(t, c.want, replay.TaskOutcome(c.status, c.published, c.failed, c.unknown, c.remaining), "%+v", c)
	}
}
