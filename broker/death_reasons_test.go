package broker

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/store"
)

// Every reason the consumer stores is one a filter accepts (store.Reasons
// validates --reason and the API's reason): the two lists are one set.
func TestReasonsAreTheFiltersSet(t *testing.T) {
	t.Parallel()
	got := map[string]bool{}
	for _, in := range []string{"rejected", "EXPIRED", "maxlen", "delivery-limit", "delivery_limit", "exploded", ""} {
		got[normalizeReason(in)] = true
	}
	want := map[string]bool{}
	for _, r := range store.Reasons {
		want[r] = true
	}
	require.Equal(t, want, got)
}
