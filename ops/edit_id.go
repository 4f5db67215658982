package ops

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"strings"
)

// editCopyDomain keeps the hash of editCopyID apart from any other
// SHA-256 over similar bytes; a change of the encoding below changes it.
const editCopyDomain = "dlq edit copy x-dlq-replay-id v2"

// editCopyID is the x-dlq-replay-id of the copy an edit makes of message
// id of the database origin (store.Origin), following the edit recorded by
// task after (0: the message's first edit), to exchange with routingKey:
// a version 8 UUID of SHA-256 over them. The server derives it and no
// caller chooses it, so that it stays unique per publish (a downstream
// idempotency key): another message, another database, or a redo after a
// failed edit (a new task: its copy may have gone out after all) gives
// another id, and the store records one edit after each (NewEdit's
// AfterTaskID), so no two copies share one; a preview and its send give
// the same one.
//
// The edit's content is left out on purpose: the copy carries values
// restored from masked placeholders, and an unkeyed hash over them would
// let anyone who sees the id but not those values test guesses of them
// offline (a card number has few enough), as bodyHidesFromAudit says of
// the audit's hashes.
func editCopyID(origin string, id, after int64, exchange, routingKey string) string {
	h := sha256.New()
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint64(nil, uint64(len(b))))
		h.Write(b)
	}
	field([]byte(editCopyDomain))
	field([]byte(origin))
	field(binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, uint64(id)), uint64(after)))
	field([]byte(exchange))
	field([]byte(routingKey))
	var u [16]byte
	copy(u[:], h.Sum(nil))
	u[6] = u[6]&0x0f | 0x80 // version 8: vendor-specific (RFC 9562)
	u[8] = u[8]&0x3f | 0x80 // variant 10
	x := hex.EncodeToString(u[:])
	return strings.Join([]string{x[:8], x[8:12], x[12:16], x[16:20], x[20:]}, "-")
}
