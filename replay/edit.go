package replay

import (
	"encoding/json"
	"fmt"

	amqp "github.com/rabbitmq/amqp091-go"

	"github.com/dlq/dlq/broker"
	"github.com/dlq/dlq/store"
)

// HeaderEditedFrom marks the corrected copy an edit-then-replay publishes:
// the id of the stored message it was made from.
const HeaderEditedFrom = "x-dlq-edited-from"

// Edit is what an edit-then-replay changes in the message it publishes. It
// rides on the task (store: replay_tasks.edit), never in the task's
// request, so no task view shows the new body.
type Edit struct {
	// Body replaces the body when set.
	Body []byte `json:"body,omitempty"`
	// SetHeaders are headers to add or replace, in the typed JSON form of
	// the header codec (broker.DecodeHeadersJSON).
	SetHeaders json.RawMessage `json:"set_headers,omitempty"`
	// RemoveHeaders are headers to drop.
	RemoveHeaders []string `json:"remove_headers,omitempty"`
	// ReplayID is the copy's x-dlq-replay-id, chosen when the edit is made
	// so that the original can name its copy.
	ReplayID string `json:"replay_id"`
}

// EditedPublishing is the corrected copy of m: the message as a replay
// would publish it, with the edit applied. The copy is a new message, not
// a replay of m: it carries x-dlq-edited-from instead of x-dlq-id and
// x-dlq-replay-count, so that if it dies it is stored as a message of its
// own (which is what a later edit then changes), and its own replay id.
func EditedPublishing(m store.ClaimedMessage, e Edit, keepUserID bool) (amqp.Publishing, error) {
	pub, err := buildPublishing(m, e.ReplayID, keepUserID)
	if err != nil {
		return amqp.Publishing{}, err
	}
	if e.Body != nil {
		pub.Body = e.Body
	}
	for _, k := range e.RemoveHeaders {
		delete(pub.Headers, k)
	}
	if len(e.SetHeaders) > 0 {
		set, err := broker.DecodeHeadersJSON(e.SetHeaders)
		if err != nil {
			return amqp.Publishing{}, fmt.Errorf("edit of message %d: set_headers: %w", m.ID, err)
		}
		for k, v := range set {
			pub.Headers[k] = v
		}
	}
	delete(pub.Headers, broker.HeaderID)
	delete(pub.Headers, broker.HeaderReplayCount)
	pub.Headers[HeaderEditedFrom] = m.ID
	pub.Headers[broker.HeaderReplayID] = e.ReplayID
	return pub, nil
}

// NewReplayID returns a fresh x-dlq-replay-id.
func NewReplayID() string { return newReplayID() }
