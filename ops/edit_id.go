package ops

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"slices"
	"strings"

	"github.com/dlq/dlq/replay"
)

// editCopyDomain keeps the hash of editCopyID apart from any other
// SHA-256 over similar bytes; a change of the encoding below changes it.
const editCopyDomain = "dlq edit copy x-dlq-replay-id v1"

// editCopyID is the x-dlq-replay-id of the copy that edit makes of message
// id, following the edit recorded by task after (0: the message's first
// edit), to exchange with routingKey: a version 8 UUID of SHA-256 over
// them. The server derives it and no caller chooses it, so that it stays
// unique per publish (a downstream idempotency key): another message, a
// redo after a failed edit (a new task: its copy may have gone out after
// all) or another edit gives another id, while a preview and the send of
// the same edit give the same one. The headers removed are a set: their
// order changes nothing sent, so nothing in the id.
func editCopyID(id, after int64, exchange, routingKey string, edit replay.Edit) string {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	field([]byte(editCopyDomain))
	field(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(id)), uint64(after)))
	field([]byte(exchange))
	field([]byte(routingKey))
	// A body left as it was (nil) is not the empty body.
	if edit.Body == nil {
		field([]byte{0})
	} else {
		field([]byte{1})
		field(edit.Body)
	}
	field(edit.SetHeaders)
	removed := slices.Clone(edit.RemoveHeaders)
	slices.Sort(removed)
	removed = slices.Compact(removed)
	field(binary.BigEndian.AppendUint64(nil, uint64(len(removed))))
	for _, k := range removed {
		field([]byte(k))
	}
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8: vendor-specific (RFC 9562)
	u[8] = u[8]&0x3f | 0x80 // variant 10
	x := hex.EncodeToString(u[:])
	return strings.Join([]string{x[:8], x[8:12], x[12:16], x[16:20], x[20:]}, "-")
}
