package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestNothingToConfirmIsNotOffered: a message no longer pending offers no
// Replay (the replay would skip it), an acknowledged one no Acknowledge;
// and a confirmation that would change none of its messages says so with
// no button (its "Replay 0" recorded a task that published nothing).
func TestNothingToConfirmIsNotOffered(t *testing.T) {
	t.Parallel()
	b := setup(t)
	ids := b.seed(t, many(1, "orders")...)
	id := strconv.FormatInt(ids[0], 10)
	op := b.signIn(t, tokOp)
	page := op.get(t, "/ui/messages/"+id).text
	require.Contains(t, page, `data-test="action-replay"`, "pending: replay offered")
	require.Contains(t, page, `data-test="action-ack"`)

	r := op.act(t, "/ui/act", url.Values{"action": {"acknowledge"}, "id": {id}, "back": {"/ui/messages/" + id}})
	require.Equal(t, http.StatusSeeOther, r.StatusCode, r.text)
	page = op.get(t, "/ui/messages/"+id).text
	require.NotContains(t, page, `data-test="action-replay"`, "acknowledged: a replay would skip it")
	require.NotContains(t, page, `data-test="action-ack"`, "acknowledged already")

	for _, action := range []string{"replay", "acknowledge"} {
		r = op.follow(t, op.act(t, "/ui/confirm", url.Values{"action": {action}, "id": {id}, "back": {"/ui/messages/" + id}}))
		require.Equal(t, http.StatusOK, r.StatusCode, r.text)
		require.Contains(t, r.text, `data-test="confirm-nothing"`, action)
		require.NotContains(t, r.text, `data-test="confirm"`, "%s: no button that does nothing", action)
	}
	admin := b.signIn(t, tokAdmin)
	require.Contains(t, admin.get(t, "/ui/messages/"+id).text, `data-test="action-delete"`, "still deletable by who may")
	r = admin.follow(t, admin.act(t, "/ui/confirm", url.Values{"action": {"delete"}, "id": {id}, "back": {"/ui/messages/" + id}}))
	require.Contains(t, r.text, `data-test="confirm"`, "a delete still changes it")
}
