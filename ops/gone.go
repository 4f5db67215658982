package ops

import (
	"context"
	"fmt"

	"github.com/dlq/dlq/store"
)

// MessageGone is what dlq can say of a message it does not store (or not
// within the caller's queues): a link to a deleted message leads to a
// page that says what became of it, not to a bare "not found".
type MessageGone struct {
	// Deleted: the message was stored, and was deleted. Known when the
	// audit names a delete of it (Deletion.Named), or, for a caller who
	// sees every queue, when a delete's filter reached up to its id (it
	// was then stored, and is stored no more).
	Deleted bool
	// Deletion is the audit's delete that removed it (Named) or may have
	// (a filter whose max_id reached it); nil when the newest
	// store.DeletionScanMax entries the caller may read hold none, or it
	// may not read the audit (AuditRead false).
	Deletion  *store.MessageDeletion
	AuditRead bool
}

// MessageGone says what became of message id, which the caller asked for
// and was not found. A message the caller may see is store.ErrConflict:
// it is stored. A caller with queues is never told whether a message is
// stored in a queue it does not see: only a delete it may read, which
// named the message, makes it Deleted.
func (s *Service) MessageGone(ctx context.Context, c Caller, id int64) (MessageGone, error) {
	p := c.Principal
	if err := Authorize(p, ActGetMessage); err != nil {
		return MessageGone{}, err
	}
	found, err := s.st.MessagesExist(ctx, []int64{id}, p.Queues)
	if err != nil {
		return MessageGone{}, err
	}
	if found[id] {
		return MessageGone{}, fmt.Errorf("message %d is stored: %w", id, store.ErrConflict)
	}
	var out MessageGone
	if Authorize(p, ActAudit) == nil {
		var within *store.AuditWithin
		if p.Queues != nil {
			within = &store.AuditWithin{Name: p.Name, Queues: p.Queues}
		}
		d, ok, err := s.st.MessageDeletion(ctx, id, within, store.DeletionScanMax)
		if err != nil {
			return MessageGone{}, err
		}
		out.AuditRead = true
		if ok {
			out.Deletion = &d
		}
	}
	out.Deleted = out.Deletion != nil && (out.Deletion.Named || p.Queues == nil)
	return out, nil
}
