package console_test

import (
	"context"
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestMessagePageSaysNoRunnerTookTheEdit: with no replay service running
// (setup's replay service never runs), an edit's copy waits for ever; once
// its task has waited past the time a runner takes one, the message's page
// says that no instance took it and what to check, instead of "being
// sent" with no end. It keeps following it: a runner may still come.
func TestMessagePageSaysNoRunnerTookTheEdit(t *testing.T) {
	t.Parallel()
	b := setup(t)
	id := strconv.FormatInt(b.seed(t, msg{queue: "orders", body: []byte(`{"sku":"A"}`)})[0], 10)
	op := b.signIn(t, tokOp)
	r := op.act(t, "/ui/messages/"+id+"/edit", url.Values{"binary": {"0"}, "body": {`{"sku":"B"}`}, "send": {"1"}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)

	page := op.get(t, "/ui/messages/"+id).text
	require.Contains(t, page, "its corrected copy is being sent: this page follows it", "just asked: a runner takes it moments later")
	require.NotContains(t, page, "no dlq instance has taken")

	// A minute untaken (the test's own schema holds this task only).
	_, err := b.db.Exec(context.Background(), `UPDATE replay_tasks SET created_at = created_at - interval '1 minute',
		start_at = start_at - interval '1 minute' WHERE edit IS NOT NULL`)
	require.NoError(t, err)
	page = op.get(t, "/ui/messages/"+id).text
	require.Regexp(t, `its corrected copy waits: no dlq instance has taken its task, replay \d+, in the 1m( \d+s)? since it could start \(check that a dlq serve of this version is up`, page)
	require.Contains(t, page, "this page follows it", "still followed: the copy goes out once a runner comes")
	require.Contains(t, page, `data-state="in_progress"`)
}
