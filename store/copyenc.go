package store

import (
	"context"
	"encoding/binary"
	"fmt"
	"io"
	"math"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// Ingest's COPY in PostgreSQL's binary format, written by hand: the
// columns and their types are fixed (ingestColumns), so each value is
// appended as what it is, where pgx's CopyFrom boxes every value of every
// row in an interface and looks up its encoder by type (a tenth of dlq's
// CPU in a drain). The values are the ones IngestBatch gave pgx, with the
// same NULLs; TestIngestCopyMatchesPgx holds the two to the same rows.

// copyHeader starts a binary COPY: signature, flags, header extension.
var copyHeader = []byte("PGCOPY\n\xff\r\n\x00\x00\x00\x00\x00\x00\x00\x00\x00")

// Element types of the arrays ingest writes.
const (
	oidText = 25
	oidInt8 = 20
)

// microseconds from the Unix epoch to PostgreSQL's (2000-01-01 UTC).
const pgEpochMicros = 946684800 * 1000000

// copyBuf is one COPY's data.
type copyBuf struct{ b []byte }

func (c *copyBuf) row(fields int) { c.b = binary.BigEndian.AppendUint16(c.b, uint16(fields)) }

func (c *copyBuf) null() { c.b = binary.BigEndian.AppendUint32(c.b, math.MaxUint32) }

func (c *copyBuf) text(s string) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(s)))
	c.b = append(c.b, s...)
}

// textOrNull writes s, or NULL for "" (nullText).
func (c *copyBuf) textOrNull(s string) {
	if s == "" {
		c.null()
		return
	}
	c.text(cleanText(s))
}

func (c *copyBuf) bytes(b []byte) {
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(b)))
	c.b = append(c.b, b...)
}

// json writes a json column's value, NULL for nil (as pgx does).
func (c *copyBuf) json(b []byte) {
	if b == nil {
		c.null()
		return
	}
	c.bytes(b)
}

// jsonWithout writes a json column's value b without its part cut
// (NewMessage.DeathHeader), NULL for nil.
func (c *copyBuf) jsonWithout(b []byte, cut Span) {
	if b == nil || cut.Empty() {
		c.json(b)
		return
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(len(b)-(cut.To-cut.From)))
	c.b = append(c.b, b[:cut.From]...)
	c.b = append(c.b, b[cut.To:]...)
}

// jsonOrNull writes a json column's value, NULL for none (nullJSON).
func (c *copyBuf) jsonOrNull(b []byte) {
	if len(b) == 0 {
		c.null()
		return
	}
	c.bytes(b)
}

// jsonb writes a jsonb column's value (version 1, then the text), NULL
// for none (nullJSON).
func (c *copyBuf) jsonb(b []byte) {
	if len(b) == 0 {
		c.null()
		return
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(1+len(b)))
	c.b = append(c.b, 1)
	c.b = append(c.b, b...)
}

func (c *copyBuf) int8(v int64) {
	c.b = binary.BigEndian.AppendUint32(c.b, 8)
	c.b = binary.BigEndian.AppendUint64(c.b, uint64(v))
}

// int4 writes v to an integer column; a value out of its range is an
// error, as pgx's is.
func (c *copyBuf) int4(v int64, column string) error {
	if v < math.MinInt32 || v > math.MaxInt32 {
		return fmt.Errorf("%s %d is out of range for an integer", column, v)
	}
	c.b = binary.BigEndian.AppendUint32(c.b, 4)
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(int32(v)))
	return nil
}

func (c *copyBuf) int4OrNull(v *int32) {
	if v == nil {
		c.null()
		return
	}
	c.b = binary.BigEndian.AppendUint32(c.b, 4)
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(*v))
}

func (c *copyBuf) timestamptz(t time.Time) {
	c.int8(t.Unix()*1000000 + int64(t.Nanosecond())/1000 - pgEpochMicros)
}

// arrayHeader starts a one-dimensional array of n elements of type oid
// whose elements take size bytes.
func (c *copyBuf) arrayHeader(n, size int, oid uint32) {
	if n == 0 {
		c.b = binary.BigEndian.AppendUint32(c.b, 12)
		c.b = binary.BigEndian.AppendUint32(c.b, 0) // dimensions
		c.b = binary.BigEndian.AppendUint32(c.b, 0) // no NULLs
		c.b = binary.BigEndian.AppendUint32(c.b, oid)
		return
	}
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(20+size))
	c.b = binary.BigEndian.AppendUint32(c.b, 1)
	c.b = binary.BigEndian.AppendUint32(c.b, 0)
	c.b = binary.BigEndian.AppendUint32(c.b, oid)
	c.b = binary.BigEndian.AppendUint32(c.b, uint32(n))
	c.b = binary.BigEndian.AppendUint32(c.b, 1) // lower bound
}

// texts writes a text[] (NULL for nil).
func (c *copyBuf) texts(v []string) {
	if v == nil {
		c.null()
		return
	}
	size := 0
	for _, s := range v {
		size += 4 + len(s)
	}
	c.arrayHeader(len(v), size, oidText)
	for _, s := range v {
		c.text(s)
	}
}

// int8s writes a bigint[] (NULL for nil).
func (c *copyBuf) int8s(v []int64) {
	if v == nil {
		c.null()
		return
	}
	c.arrayHeader(len(v), 12*len(v), oidInt8)
	for _, x := range v {
		c.int8(x)
	}
}

// copyChunk is about how much COPY data copyReader encodes at a time.
const copyChunk = 32 << 10

// copyReader encodes a batch's rows as pgconn reads them (in its own
// goroutine, so encoding overlaps sending): the COPY data of a batch, a
// megabyte beside the batch's messages, is never whole in memory.
type copyReader struct {
	rows    int
	row     func(c *copyBuf, k int) error // appends row k
	next    int
	c       copyBuf
	off     int
	started bool
	done    bool
}

func newCopyReader(rows int, row func(c *copyBuf, k int) error) *copyReader {
	return &copyReader{rows: rows, row: row, c: copyBuf{b: make([]byte, 0, copyChunk+8<<10)}}
}

func (r *copyReader) Read(p []byte) (int, error) {
	if r.off == len(r.c.b) {
		if r.done {
			return 0, io.EOF
		}
		r.c.b, r.off = r.c.b[:0], 0
		if !r.started {
			r.c.b, r.started = append(r.c.b, copyHeader...), true
		}
		for r.next < r.rows && len(r.c.b) < copyChunk {
			if err := r.row(&r.c, r.next); err != nil {
				return 0, fmt.Errorf("encode row %d: %w", r.next, err)
			}
			r.next++
		}
		if r.next == r.rows {
			r.c.b, r.done = binary.BigEndian.AppendUint16(r.c.b, math.MaxUint16), true // trailer: -1
		}
	}
	n := copy(p, r.c.b[r.off:])
	r.off += n
	return n, nil
}

// copyPlain appends the plain row of m (ingestColumns).
func (s *Store) copyPlain(c *copyBuf, m *NewMessage, batch, group int64) error {
	c.row(len(ingestColumns))
	c.textOrNull(m.MessageID)
	c.text(cleanText(m.SourceQueue))
	c.text(cleanText(m.SourceExchange))
	c.text(cleanText(m.SourceRoutingKey))
	c.text(cleanText(m.DeadLetterQueue))
	c.text(cleanText(m.Reason))
	c.int8(m.DeathCount)
	c.jsonb(m.Failure)
	c.textOrNull(m.FailureType)
	c.textOrNull(m.FailureMessage)
	c.json(m.Properties)
	c.jsonWithout(m.Headers, m.DeathHeader)
	c.bytes(nonNilBytes(m.Body))
	if err := c.int4(int64(len(m.Body)), "body_size"); err != nil {
		return err
	}
	c.timestamptz(m.FirstFailedAt)
	c.timestamptz(m.FailedAt)
	c.int8(m.Fingerprint)
	c.int8(batch)
	c.textOrNull(m.ConversionError)
	if err := c.int4(m.ReplayCount, "replay_count"); err != nil {
		return err
	}
	c.int8(group)
	keys := SearchKeys(m)
	c.texts(keys)
	c.int8s(KeyHashes(keys))
	if err := c.int4(int64(m.Returns), "ingest_returns"); err != nil {
		return err
	}
	c.jsonOrNull(m.XDeath)
	c.text(categoryOf(m.Category))
	c.int4OrNull(s.bodyTextColumn(m))
	return nil
}

// copySealed appends the sealed row r of m as row id (sealedIngestColumns).
func copySealed(c *copyBuf, m *NewMessage, r *sealedRow, fingerprint, batch, group, id int64) error {
	c.row(len(sealedIngestColumns))
	c.null() // message_id: sealed in the headers
	c.text(cleanText(m.SourceQueue))
	c.text(cleanText(m.SourceExchange))
	c.text(cleanText(m.SourceRoutingKey))
	c.text(cleanText(m.DeadLetterQueue))
	c.text(cleanText(m.Reason))
	c.int8(m.DeathCount)
	c.null() // failure
	c.textOrNull(m.FailureType)
	c.null() // failure_message
	c.json(emptyObject)
	c.json(r.headers)
	c.bytes(r.body)
	if err := c.int4(int64(len(m.Body)), "body_size"); err != nil {
		return err
	}
	c.timestamptz(m.FirstFailedAt)
	c.timestamptz(m.FailedAt)
	c.int8(fingerprint)
	c.int8(batch)
	c.textOrNull(m.ConversionError)
	if err := c.int4(m.ReplayCount, "replay_count"); err != nil {
		return err
	}
	c.int8(group)
	c.null() // search_keys
	c.int8s(r.hashes)
	if err := c.int4(int64(m.Returns), "ingest_returns"); err != nil {
		return err
	}
	c.jsonOrNull(m.XDeath)
	c.text(categoryOf(m.Category))
	c.null() // body_text_bytes
	c.int8(id)
	c.text(r.env.KeyID)
	c.bytes(r.env.DEK)
	c.bytes(r.env.Nonce)
	c.bytes(r.meta)
	return nil
}

// copyRows runs COPY table (cols) FROM STDIN in binary with the data r
// reads (copyReader), and returns how many rows it wrote.
func copyRows(ctx context.Context, tx pgx.Tx, table string, cols []string, r io.Reader) (int64, error) {
	var sql strings.Builder
	sql.WriteString("COPY " + pgx.Identifier{table}.Sanitize() + " (")
	for i, col := range cols {
		if i > 0 {
			sql.WriteString(", ")
		}
		sql.WriteString(pgx.Identifier{col}.Sanitize())
	}
	sql.WriteString(") FROM STDIN BINARY")
	tag, err := tx.Conn().PgConn().CopyFrom(ctx, r, sql.String())
	if err != nil {
		return 0, err
	}
	return tag.RowsAffected(), nil
}
