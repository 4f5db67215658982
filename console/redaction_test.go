package console_test

import (
	"net/http"
	"strconv"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/ops"
)

// A failure read from masked headers shows masked in the console below
// the reveal role: a search's snippet, the message's page, its group's
// page and the overview; the reveal role reads it.
func TestRedactedFailureInSnippetAndPages(t *testing.T) {
	t.Parallel()
	b := setup(t, func(o *setupOpts) {
		o.redaction = ops.Redaction{Headers: []string{"x-error-message", "x-error-stack"}, RevealRole: auth.RoleAdmin}
	})
	const secret = "4111111111111111"
	text := "card " + secret + " declined"
	ids := b.seed(t, msg{queue: "orders", failureType: "CardError", failureMessage: text,
		headers: `{"x-error-message":"` + text + `","x-error-stack":"CardError: ` + text + `\n  at handler (worker.go:42)"}`})
	got, err := b.ops.GetMessage(t.Context(), ops.Caller{Principal: mustPrincipal(t, b, tokAdmin)}, ids[0])
	require.NoError(t, err)
	require.NotNil(t, got.Group)
	admin, op := b.signIn(t, tokAdmin), b.signIn(t, tokOp)
	for _, c := range []struct {
		c      *client
		masked bool
	}{{admin, false}, {op, true}} {
		search := c.c.get(t, "/ui/messages?q=declined")
		require.Equal(t, http.StatusOK, search.StatusCode)
		require.Contains(t, search.text, `data-test="message-row" data-id="`+strconv.FormatInt(ids[0], 10)+`"`, "found")
		pages := []string{search.text}
		for _, path := range []string{"/ui/messages/" + strconv.FormatInt(ids[0], 10), "/ui/groups/" + *got.Group, "/ui/"} {
			r := c.c.get(t, path)
			require.Equal(t, http.StatusOK, r.StatusCode, path)
			pages = append(pages, r.text)
		}
		if !c.masked {
			require.Contains(t, search.text, secret, "the snippet")
			continue
		}
		for i, page := range pages {
			require.NotContains(t, page, secret, "page %d", i)
		}
		require.Contains(t, search.text, ops.RedactedValue)
	}
}
