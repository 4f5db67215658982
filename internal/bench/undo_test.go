package bench

import (
	"slices"
	"testing"
)

// A run defers the undoing before it makes anything; what it makes after
// is undone all the same, the latest first, and only once.
func TestUndoStackDeferredBeforePushes(t *testing.T) {
	var got []string
	func() {
		var run struct{ undo undoStack }
		defer run.undo.run()
		for _, name := range []string{"schema", "store", "queue"} {
			run.undo.push(func() { got = append(got, name) })
		}
	}()
	if want := []string{"queue", "store", "schema"}; !slices.Equal(got, want) {
		t.Fatalf("undone %v, want %v", got, want)
	}
	var u undoStack
	u.push(func() { got = append(got, "again") })
	u.run()
	u.run()
	if n := len(got); n != 4 {
		t.Fatalf("undone %d times in all, want 4 (the second run has nothing left)", n)
	}
}
