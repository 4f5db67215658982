package ops

import (
	"encoding/base64"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"hash/fnv"
	"time"

	"github.com/dlq/dlq/store"
)

// A cursor is opaque to clients: base64url of
//
//	version (1 byte) | id (8 bytes) | query hash (4 bytes) | CRC-32 (4 bytes)
//
// id is the last id of the previous page (the keyset), the query hash ties
// the cursor to the filter it was made for, and the checksum catches a
// cursor that was cut or edited. A forged cursor can only name another
// starting id: the scope and filter still come from the request, so it
// reveals nothing.
const (
	cursorVersion = 1
	cursorLen     = 1 + 8 + 4 + 4
)

var errBadCursor = errors.New("cursor is not one this API returned for this query (it may be cut, edited, or from other filters)")

// encodeCursor makes the cursor that continues after id for a query whose
// canonical form is query.
func encodeCursor(id int64, query string) string {
	var b [cursorLen]byte
	b[0] = cursorVersion
	binary.BigEndian.PutUint64(b[1:9], uint64(id))
	binary.BigEndian.PutUint32(b[9:13], queryHash(query))
	binary.BigEndian.PutUint32(b[13:17], crc32.ChecksumIEEE(b[:13]))
	return base64.RawURLEncoding.EncodeToString(b[:])
}

// decodeCursor returns the id a cursor continues after, checking that it
// is intact and belongs to query.
func decodeCursor(s, query string) (int64, error) {
	if len(s) != base64.RawURLEncoding.EncodedLen(cursorLen) {
		return 0, errBadCursor
	}
	// Strict: exactly one spelling per cursor (no stray trailing bits).
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	if err != nil || len(b) != cursorLen || b[0] != cursorVersion {
		return 0, errBadCursor
	}
	if crc32.ChecksumIEEE(b[:13]) != binary.BigEndian.Uint32(b[13:17]) {
		return 0, errBadCursor
	}
	if binary.BigEndian.Uint32(b[9:13]) != queryHash(query) {
		return 0, errBadCursor
	}
	id := int64(binary.BigEndian.Uint64(b[1:9]))
	if id <= 0 {
		return 0, errBadCursor
	}
	return id, nil
}

func queryHash(q string) uint32 {
	h := fnv.New32a()
	_, _ = h.Write([]byte(q))
	return h.Sum32()
}

// A sorted listing's cursor (store.ListOptions.Sort other than newest
// first) carries its whole sort key: base64url of
//
//	version 2 (1 byte) | id (8) | failed_at, µs since 1970 (8) | queue length (2) | queue | query hash (4) | CRC-32 (4)
//
// bound like the others to its query, which includes the sort.
const sortCursorVersion = 2

func encodeSortCursor(k store.SortKey, query string) string {
	b := make([]byte, 0, 1+8+8+2+len(k.Queue)+4+4)
	b = append(b, sortCursorVersion)
	b = binary.BigEndian.AppendUint64(b, uint64(k.ID))
	b = binary.BigEndian.AppendUint64(b, uint64(k.FailedAt.UnixMicro()))
	b = binary.BigEndian.AppendUint16(b, uint16(len(k.Queue)))
	b = append(b, k.Queue...)
	b = binary.BigEndian.AppendUint32(b, queryHash(query))
	b = binary.BigEndian.AppendUint32(b, crc32.ChecksumIEEE(b))
	return base64.RawURLEncoding.EncodeToString(b)
}

func decodeSortCursor(s, query string) (store.SortKey, error) {
	b, err := base64.RawURLEncoding.Strict().DecodeString(s)
	const fixed = 1 + 8 + 8 + 2 + 4 + 4
	if err != nil || len(b) < fixed || b[0] != sortCursorVersion || len(s) > 1024 {
		return store.SortKey{}, errBadCursor
	}
	n := len(b) - 4
	if crc32.ChecksumIEEE(b[:n]) != binary.BigEndian.Uint32(b[n:]) {
		return store.SortKey{}, errBadCursor
	}
	qlen := int(binary.BigEndian.Uint16(b[17:19]))
	if 19+qlen+8 != len(b) || binary.BigEndian.Uint32(b[19+qlen:]) != queryHash(query) {
		return store.SortKey{}, errBadCursor
	}
	k := store.SortKey{
		ID:       int64(binary.BigEndian.Uint64(b[1:9])),
		FailedAt: time.UnixMicro(int64(binary.BigEndian.Uint64(b[9:17]))).UTC(),
		Queue:    string(b[19 : 19+qlen]),
	}
	if k.ID <= 0 {
		return store.SortKey{}, errBadCursor
	}
	return k, nil
}
