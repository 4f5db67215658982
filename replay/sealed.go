package replay

import (
	"fmt"

	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/store"
)

// open fills a sealed claimed message (encryption at rest, package store)
// with its real properties, headers and body: what a replay sends is the
// message as it arrived. A message that cannot be opened (its key is not
// configured, or it does not authenticate) fails its publish with the
// reason, and stays pending.
func (s *Service) open(m *store.ClaimedMessage) error {
	sl := m.Sealed
	if sl == nil {
		return nil
	}
	if s.cfg.Ring == nil {
		return fmt.Errorf("message %d is encrypted: %w", m.ID, &crypt.MissingKeyError{KeyID: sl.Envelope.KeyID})
	}
	k, err := s.cfg.Ring.Unwrap(sl.Envelope)
	if err != nil {
		return fmt.Errorf("message %d: %w", m.ID, err)
	}
	ref := store.MessageRef(m.ID)
	plain, err := k.Open(nil, ref, crypt.FieldMeta, sl.Meta)
	if err != nil {
		return fmt.Errorf("message %d: %w", m.ID, err)
	}
	meta, err := store.ParseSealedMeta(plain)
	if err != nil {
		return fmt.Errorf("message %d: %w", m.ID, err)
	}
	headers, err := store.MergeHeaders(m.Headers, meta.Headers)
	if err != nil {
		return fmt.Errorf("message %d: %w", m.ID, err)
	}
	body, err := k.Open(make([]byte, 0, len(sl.Body)), ref, crypt.FieldBody, sl.Body)
	if err != nil {
		return fmt.Errorf("message %d: %w", m.ID, err)
	}
	m.Properties, m.Headers, m.Body, m.Sealed = meta.Properties, headers, body, nil
	return nil
}

// taskEdit returns a task's edit as JSON, opened if it is sealed.
func (s *Service) taskEdit(t store.ReplayTask) ([]byte, error) {
	blob, ok := store.SealedEdit(t.Edit)
	if !ok {
		return t.Edit, nil
	}
	if s.cfg.Ring == nil {
		keyID, _ := crypt.BlobKeyID(blob)
		return nil, fmt.Errorf("the edit of task %d is encrypted: %w", t.ID, &crypt.MissingKeyError{KeyID: keyID})
	}
	edit, err := s.cfg.Ring.OpenBlob(store.TaskRef(t.ID), crypt.FieldEdit, blob)
	if err != nil {
		return nil, fmt.Errorf("the edit of task %d: %w", t.ID, err)
	}
	return edit, nil
}
