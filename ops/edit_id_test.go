package ops

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"
)

// The copy's replay id is a version 8 UUID derived from the database, the
// message and the edit it follows: the same for the same inputs (a
// preview and its send), another when any of them changes — a redo after
// a failed edit above all, whose copy may have gone out. The edit's
// content is no input (it may hold masked values).
func TestEditCopyID(t *testing.T) {
	t.Parallel()
	const origin = "5b0c1c52-4d1e-4a8e-9d3f-2f8a6c0e7b11"
	id := editCopyID(origin, 7, 0, "orders", "order.created")
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), id)
	require.Equal(t, id, editCopyID(origin, 7, 0, "orders", "order.created"), "stable")

	others := map[string]string{
		"another database": editCopyID("0e4a2b9f-1c3d-4e5f-8a7b-6c5d4e3f2a1b", 7, 0, "orders", "order.created"),
		"another message":  editCopyID(origin, 8, 0, "orders", "order.created"),
		"after an edit":    editCopyID(origin, 7, 41, "orders", "order.created"),
		"after another":    editCopyID(origin, 7, 42, "orders", "order.created"),
		"another exchange": editCopyID(origin, 7, 0, "orders2", "order.created"),
		"another key":      editCopyID(origin, 7, 0, "orders", "order.updated"),
		// The fields are length-prefixed: moving bytes across a boundary
		// is another target.
		"shifted": editCopyID(origin, 7, 0, "ordersorder", ".created"),
	}
	seen := map[string]string{id: "the edit"}
	for what, other := range others {
		require.NotContains(t, seen, other, "%s gives the id of %s", what, seen[other])
		seen[other] = what
	}
}
