package ops_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/ops"
)

// Each reason a replay records, as the broker and the task word it, gets
// what to do about it; one it does not know gets none.
func TestReplayErrorAdvice(t *testing.T) {
	t.Parallel()
	for reason, want := range map[string]string{
		`exchange "billing-x" does not exist`:                                   "declare the exchange first",
		`exchange "billing-x" does not exist (NOT_FOUND - no exchange)`:         "declare the exchange first",
		`unroutable: exchange "" routing key "orders.retry": 312 NO_ROUTE`:      "The default exchange delivers only to the queue its routing key names",
		`unroutable: exchange "billing-x" routing key "invoices": 312 NO_ROUTE`: "bind a queue first",
		"the broker refused the message (basic.nack)":                           "The broker refused it",
		"outcome unknown: the connection closed before the broker confirmed":    "It may have been delivered",
		"not sent: the connection is closed":                                    "could not reach the broker",
		"refused: 403 ACCESS_REFUSED":                                           "permissions",
		"something new":                                                         "",
	} {
		got := ops.ReplayErrorAdvice(reason)
		if want == "" {
			require.Empty(t, got, reason)
			continue
		}
		require.True(t, strings.Contains(got, want), "%s: %q", reason, got)
	}
}
