package api_test

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
)

// A replay of ids no message ever had (typos) is a 404, and so is its dry
// run: the dry run answers what the request would. Beside an existing id,
// such an id is skipped as not_found (never stored), not as deleted, in
// the dry run as in the task.
func TestReplayNeverStoredIDsDryRunAgrees(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) { o.realReplayer = true })
	ids := b.seed(t, many("orders", 1)...)
	never := ids[0] + 1_000_000
	for _, dryRun := range []bool{true, false} {
		r := b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": []int64{never}, "dry_run": dryRun})
		require.Equal(t, http.StatusNotFound, r.status, "dry run %v: %s", dryRun, r.body)
	}
	type answer struct {
		ID          int64            `json:"id"`
		Skipped     int64            `json:"skipped"`
		SkipReasons map[string]int64 `json:"skip_reasons"`
	}
	for _, dryRun := range []bool{true, false} {
		r := b.do(t, "POST", "/api/v1/replays", tokOp, map[string]any{"ids": []int64{ids[0], never}, "dry_run": dryRun})
		require.Less(t, r.status, 300, "dry run %v: %s", dryRun, r.body)
		var a answer
		r.json(t, &a)
		if !dryRun {
			// The reasons are counted when a task is read.
			r = b.do(t, "GET", fmt.Sprintf("/api/v1/replays/%d", a.ID), tokViewer, nil)
			require.Equal(t, http.StatusOK, r.status, "%s", r.body)
			r.json(t, &a)
		}
		require.Equal(t, int64(1), a.Skipped, "dry run %v: %s", dryRun, r.body)
		require.Equal(t, map[string]int64{"not_found": 1}, a.SkipReasons, "dry run %v: %s", dryRun, r.body)
	}
}
