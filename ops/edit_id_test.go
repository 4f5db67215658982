package ops

import (
	"regexp"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
)

// The copy's replay id is a version 8 UUID derived from the message, the
// edit it follows and the edit: the same for the same inputs (a preview
// and its send), another when any of them changes — a redo after a failed
// edit above all, whose copy may have gone out.
func TestEditCopyID(t *testing.T) {
	t.Parallel()
	base := replay.Edit{Body: []byte(`{"sku":"B"}`), SetHeaders: []byte(`{"tenant":"t2"}`), RemoveHeaders: []string{"x-exception-message", "x-b"}}
	id := editCopyID(7, 0, "orders", "order.created", base)
	require.Regexp(t, regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-8[0-9a-f]{3}-[89ab][0-9a-f]{3}-[0-9a-f]{12}$`), id)
	require.Equal(t, id, editCopyID(7, 0, "orders", "order.created", base), "stable")
	reordered := base
	reordered.RemoveHeaders = []string{"x-b", "x-exception-message", "x-b"}
	require.Equal(t, id, editCopyID(7, 0, "orders", "order.created", reordered), "the headers removed are a set")

	with := func(f func(e *replay.Edit)) replay.Edit {
		e := base
		e.RemoveHeaders = append([]string(nil), base.RemoveHeaders...)
		f(&e)
		return e
	}
	others := map[string]string{
		"another message":   editCopyID(8, 0, "orders", "order.created", base),
		"after an edit":     editCopyID(7, 41, "orders", "order.created", base),
		"after another":     editCopyID(7, 42, "orders", "order.created", base),
		"another exchange":  editCopyID(7, 0, "orders2", "order.created", base),
		"another key":       editCopyID(7, 0, "orders", "order.updated", base),
		"another body":      editCopyID(7, 0, "orders", "order.created", with(func(e *replay.Edit) { e.Body = []byte(`{"sku":"C"}`) })),
		"the body kept":     editCopyID(7, 0, "orders", "order.created", with(func(e *replay.Edit) { e.Body = nil })),
		"an empty body":     editCopyID(7, 0, "orders", "order.created", with(func(e *replay.Edit) { e.Body = []byte{} })),
		"other headers set": editCopyID(7, 0, "orders", "order.created", with(func(e *replay.Edit) { e.SetHeaders = []byte(`{"tenant":"t3"}`) })),
		"fewer removed":     editCopyID(7, 0, "orders", "order.created", with(func(e *replay.Edit) { e.RemoveHeaders = e.RemoveHeaders[:1] })),
		"failure kept":      editCopyID(7, 0, "orders", "order.created", with(func(e *replay.Edit) { e.RemoveHeaders = []string{"x-b"} })),
		// The fields are length-prefixed: moving bytes across a boundary
		// is another edit.
		"shifted": editCopyID(7, 0, "orders", "order.create", with(func(e *replay.Edit) { e.Body = append([]byte("d"), e.Body...) })),
	}
	seen := map[string]string{id: "the edit"}
	for what, other := range others {
		require.NotContains(t, seen, other, "%s gives the id of %s", what, seen[other])
		seen[other] = what
	}
}
