package bench

// undoStack holds what a run made (a schema, a store, a connection, a
// queue), each as the function that undoes it; run undoes them the latest
// first, as deferred calls would. Both methods take a pointer, so that
// `defer x.undo.run()` right after the stack is made still sees what is
// pushed later.
type undoStack []func()

func (u *undoStack) push(f func()) { *u = append(*u, f) }

func (u *undoStack) run() {
	for i := len(*u) - 1; i >= 0; i-- {
		(*u)[i]()
	}
	*u = nil
}
