package main

import (
	"context"
	"encoding/json"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// TestReplaysShowWhyMessagesFailed: `dlq replays N` of a finished task
// whose messages failed says why (text and --json errors), and
// `dlq ls --replay-task N --replay-outcome failed --status all`, the
// command the replay's hint names, lists those messages.
func TestReplaysShowWhyMessagesFailed(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	st, _, ids := clitest.Seeded(t)
	ctx := context.Background()
	queue, tweak := replayControl(t, st, nil)
	url := clitest.ServeWith(t, st, nil, tweak)

	// A task over two messages: both fail for want of the exchange, then
	// it is cancelled, so it is finished.
	actor := store.Actor{Name: "admin", Role: "admin", Via: "test"}
	task, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{IDs: ids[:2], Status: "all"},
		MaxItems: 10, Request: json.RawMessage(`{}`), Actor: actor})
	require.NoError(t, err)
	res, err := st.ClaimReplayBatch(ctx, store.ReplayClaim{TaskID: task.ID, Token: "c", Lease: time.Minute, IDs: ids[:2], MaxReplays: 5})
	require.NoError(t, err)
	require.Len(t, res.Messages, 2)
	const why = `Exception (404) Reason: "NOT_FOUND - no exchange 'missing' in vhost '/'"`
	_, err = st.SettleReplayOutcomes(ctx, task.ID, []store.ReplayOutcome{
		{ID: ids[0], Token: "c", Result: store.OutcomeFailed, Error: why},
		{ID: ids[1], Token: "c", Result: store.OutcomeFailed, Error: why},
	}, false, "c")
	require.NoError(t, err)
	_, err = st.CancelReplayTask(ctx, task.ID, actor, nil)
	require.NoError(t, err)

	id := strconv.FormatInt(task.ID, 10)
	env := append(controlEnv(queue, clitest.AdminToken), "DLQ_URL="+url)
	code, out, errOut := execDLQEnv(t, bin, env, "replays", id)
	require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)
	require.Regexp(t, `\n  failed +2: `+regexp.QuoteMeta(why)+"\n", out)

	// The list as long as --limit says there may be more.
	code, out, errOut = execDLQEnv(t, bin, env, "replays", "--limit", "1")
	require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)
	require.Contains(t, errOut, "showing the newest 1; --limit for more", out)

	code, out, errOut = execDLQEnv(t, bin, env, "replays", id, "--json")
	require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)
	var got replay.Task
	require.NoError(t, json.Unmarshal([]byte(out), &got), out)
	require.Equal(t, []store.ReplayErrorCount{{Outcome: store.OutcomeFailed, Error: why, Count: 2}}, got.Errors, out)

	code, out, errOut = execDLQEnv(t, bin, env, "ls", "--replay-task", id, "--replay-outcome", "failed", "--status", "all", "--json")
	require.Equal(t, cli.ExitOK, code, "%s%s", out, errOut)
	var page struct {
		Messages []struct {
			ID int64 `json:"id"`
		} `json:"messages"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &page), out)
	require.Len(t, page.Messages, 2, out)

	// The same selection acts: ack's and rm's dry runs count those two
	// (the flags are the listing's, sent in the action's JSON filter).
	for _, action := range []string{"ack", "rm"} {
		code, out, errOut = execDLQEnv(t, bin, env, action, "--dry-run", "--replay-task", id, "--replay-outcome", "failed", "--json")
		require.Equal(t, cli.ExitOK, code, "%s: %s%s", action, out, errOut)
		var res store.ActionResult
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		require.EqualValues(t, 2, res.Matched, "dlq %s --replay-task %s --replay-outcome failed: %s", action, id, out)
	}
}
