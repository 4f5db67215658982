package replay

import (
	"context"
	"time"
)

// markAhead keeps a claim's write-ahead mark (store.MarkReplayClaim)
// ahead of publishing: a message is published only once the mark covers
// it, and the next stretch is marked in the background while the current
// one goes out, so publishing rarely waits for it. If the process dies,
// only the marked stretch can be in doubt; the rest of the claim goes back
// to the task untouched.
type markAhead struct {
	r       *taskRun
	b       *claimBatch
	through int // index of the last message covered
	pending chan markResult
}

func newMarkAhead(r *taskRun, b *claimBatch) *markAhead {
	return &markAhead{r: r, b: b, through: b.marked}
}

// prefetch marks the stretch after the one the claim marked, before the
// batch's turn comes.
func (m *markAhead) prefetch() {
	if m.pending == nil && m.through < len(m.b.msgs)-1 {
		m.start(m.through + 1)
	}
}

type markResult struct {
	through int
	err     error
}

// markStep is how many messages one mark covers; markFirst how many the
// claim itself marks, so that publishing a batch can start at once while a
// claimed batch that waits its turn has only a few messages in doubt.
//
// A mark is a small transaction, but its commit waits for the WAL that the
// claims and settlements in flight wrote before it (a megabyte each): 8 ms
// on average on a busy machine, while the publisher, which goes in bursts
// as confirms free its window, sends 64 messages in a few. With stretches
// of 128 the publisher waited for marks during a quarter of a run
// (measured); a stretch now covers a whole default batch, marked while the
// previous batch's last markStep/2 messages go out.
const (
	markStep  = 512
	markFirst = 32
)

func (m *markAhead) ensure(ctx context.Context, i int) error {
	for i > m.through {
		if m.pending == nil {
			m.start(i)
		}
		select {
		case res := <-m.pending:
			m.pending = nil
			if res.err != nil {
				return res.err
			}
			m.through = max(m.through, res.through)
		case <-ctx.Done():
			return context.Cause(ctx)
		}
	}
	// Mark the next stretch while half a stretch is still ahead: a mark can
	// take a while when the database is busy, and publishing should not
	// wait for it.
	if m.pending == nil && m.through < len(m.b.msgs)-1 && m.through-i < markStep/2 {
		m.start(m.through + 1)
	}
	return nil
}

// start marks the stretch beginning at index from.
func (m *markAhead) start(from int) {
	through := min(from+markStep-1, len(m.b.msgs)-1)
	ch := make(chan markResult, 1)
	m.pending = ch
	r, token, id := m.r, m.b.token, m.b.msgs[through].ID
	go func() {
		ctx, cancel := context.WithTimeout(context.WithoutCancel(r.ctx), 30*time.Second)
		defer cancel()
		ch <- markResult{through: through, err: r.s.st.MarkReplayClaim(ctx, r.task.ID, token, id)}
	}()
}

// wait lets a mark in flight finish.
func (m *markAhead) wait() {
	if m.pending != nil {
		<-m.pending
	}
}
