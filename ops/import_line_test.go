package ops

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/auth"
)

// An export line keeps its failure category through an import; one that is
// not a category is refused, named.
func TestImportLineCategory(t *testing.T) {
	t.Parallel()
	admin := auth.Principal{Name: "admin", Role: auth.RoleAdmin}
	line := func(cat string) []byte {
		return []byte(`{"id":7,"origin":"9b2f4c36-8a51-4a87-9d5e-6b8f2f9e2c11","source_queue":"orders","dead_letter_queue":"dlq",` +
			`"reason":"rejected","properties":{},"headers":{},"body":"e30=","first_failed_at":"2026-11-25T10:00:00Z",` +
			`"failed_at":"2026-11-25T10:00:00Z"` + cat + `}`)
	}
	m, end, err := parseImportLine(line(`,"category":"transient","auto_exhausted":false`), admin)
	require.NoError(t, err)
	require.False(t, end)
	require.Equal(t, "transient", m.Message.Category)
	m, _, err = parseImportLine(line(``), admin)
	require.NoError(t, err)
	require.Empty(t, m.Message.Category, "no category: the store's default (unknown)")
	_, _, err = parseImportLine(line(`,"category":"flaky"`), admin)
	require.ErrorContains(t, err, `category "flaky"`)
}

// A line's death reason is one of the reasons dlq stores (store.Reasons),
// which filters, policies and category rules select by; any other is
// refused, naming the member and what is allowed.
func TestImportLineReason(t *testing.T) {
	t.Parallel()
	admin := auth.Principal{Name: "admin", Role: auth.RoleAdmin}
	line := func(reason string) []byte {
		return []byte(`{"id":7,"origin":"9b2f4c36-8a51-4a87-9d5e-6b8f2f9e2c11","source_queue":"orders","dead_letter_queue":"dlq",` +
			`"reason":"` + reason + `","properties":{},"headers":{},"body":"e30=","first_failed_at":"2026-11-25T10:00:00Z",` +
			`"failed_at":"2026-11-25T10:00:00Z"}`)
	}
	for _, r := range []string{"rejected", "expired", "maxlen", "delivery_limit", "unknown"} {
		m, _, err := parseImportLine(line(r), admin)
		require.NoError(t, err, r)
		require.Equal(t, r, m.Message.Reason)
	}
	for _, r := range []string{"", "Rejected", "delivery-limit", "bogus"} {
		_, _, err := parseImportLine(line(r), admin)
		require.ErrorContains(t, err, fmt.Sprintf(`reason %q is not one of rejected, expired, maxlen, delivery_limit, unknown`, r))
	}
}
