package store_test

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/crypt"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/store"
)

func newKey(t *testing.T, id string) crypt.Key {
	t.Helper()
	b := make([]byte, crypt.KeySize)
	_, err := rand.Read(b)
	require.NoError(t, err)
	k, err := crypt.NewKey(id, b)
	require.NoError(t, err)
	return k
}

func newRing(t *testing.T, keys ...crypt.Key) *crypt.Ring {
	t.Helper()
	r, err := crypt.NewRing(keys)
	require.NoError(t, err)
	return r
}

// openStore opens a store on dsn, sealing with ring (nil: plain).
func openStore(t *testing.T, dsn string, ring *crypt.Ring, seal func(string) bool) *store.Store {
	t.Helper()
	cfg := store.Config{DatabaseURL: dsn, MaxConns: 4}
	if ring != nil {
		cfg.Encryption = &store.Encryption{Ring: ring, SealHeader: seal}
	}
	st, err := store.Open(context.Background(), cfg)
	require.NoError(t, err)
	t.Cleanup(st.Close)
	_, err = st.Migrate(context.Background(), nil)
	require.NoError(t, err)
	return st
}

const marker = "MARKER-7b1d"

func sealedMsg(queue string, fp int64) store.NewMessage {
	m := msg(queue, `{"card":{"number":"`+marker+`"}}`, fp)
	m.MessageID = "mid-" + marker
	m.CorrelationID = "cid-" + marker
	m.Properties = json.RawMessage(`{"content_type":"application/json","correlation_id":"cid-` + marker + `","message_id":"mid-` + marker + `"}`)
	m.Headers = json.RawMessage(`{"authorization":"Bearer ` + marker + `","x-death":[],"x-tenant":"acme-42"}`)
	m.FailureType = "CardError"
	m.FailureMessage = "card " + marker + " declined"
	m.Failure = json.RawMessage(`{"type":"CardError","message":"card ` + marker + ` declined","stack":"at pay(` + marker + `)"}`)
	return m
}

// open does what ops and replay do with a sealed message.
func open(t *testing.T, ring *crypt.Ring, m store.Message) (store.SealedMeta, json.RawMessage, []byte) {
	t.Helper()
	require.NotNil(t, m.Sealed)
	k, err := ring.Unwrap(m.Sealed.Envelope)
	require.NoError(t, err)
	plain, err := k.Open(nil, store.MessageRef(m.ID), crypt.FieldMeta, m.Sealed.Meta)
	require.NoError(t, err)
	meta, err := store.ParseSealedMeta(plain)
	require.NoError(t, err)
	headers, err := store.MergeHeaders(m.Headers, meta.Headers)
	require.NoError(t, err)
	body, err := k.Open(nil, store.MessageRef(m.ID), crypt.FieldBody, m.Sealed.Body)
	require.NoError(t, err)
	return meta, headers, body
}

func TestSealedIngest(t *testing.T) {
	t.Parallel()
	ring := newRing(t, newKey(t, "k1"))
	dsn := dlqtest.Schema(t)
	st := openStore(t, dsn, ring, nil)
	db := dlqtest.DB(t, dsn)
	ctx := context.Background()
	in := sealedMsg("orders", 1)
	_, res := ingest(t, st, in)
	require.Equal(t, 1, res.Inserted)

	// Nothing of the message is in a column as text.
	var row string
	require.NoError(t, db.QueryRow(ctx, `SELECT d::text FROM dead_messages d`).Scan(&row))
	require.NotContains(t, row, marker)
	require.NotContains(t, strings.ToLower(row), strings.ToLower(marker))
	var groups string
	require.NoError(t, db.QueryRow(ctx, `SELECT string_agg(g::text, '') FROM failure_groups g`).Scan(&groups))
	require.NotContains(t, groups, marker)

	page, err := st.ListMessages(ctx, store.Filter{}, store.ListOptions{IncludeBody: true})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
	m := page.Messages[0]
	require.Nil(t, m.MessageID, "the message id is sealed with the properties")
	require.Nil(t, m.Body, "the body stays sealed until opened")
	meta, headers, body := open(t, ring, m)
	require.Equal(t, string(in.Properties), string(meta.Properties))
	require.Equal(t, string(in.Failure), string(meta.Failure))
	require.Equal(t, string(in.Headers), string(headers))
	require.Equal(t, in.Body, body)

	// Exact search through the keyed hashes: message id, correlation id,
	// a header value, a value in the failure message.
	for _, q := range []string{"mid-" + marker, "CID-" + marker, "acme-42", strings.ToLower(marker)} {
		page, err := st.ListMessages(ctx, store.Filter{Query: q}, store.ListOptions{})
		require.NoError(t, err, q)
		require.Len(t, page.Messages, 1, q)
		res, err := st.Acknowledge(ctx, store.Filter{Query: q}, store.Actor{Name: "t"}, store.ActionOptions{DryRun: true})
		require.NoError(t, err)
		require.EqualValues(t, 1, res.Matched, q)
	}
	// Failure text and bodies are sealed: they are not searched.
	for _, q := range []string{"declined", "card", `"number"`} {
		page, err := st.ListMessages(ctx, store.Filter{Query: q, SourceQueue: "orders"}, store.ListOptions{})
		require.NoError(t, err, q)
		require.Empty(t, page.Messages, q)
	}

	// The failure group's text is sealed, bound to the group.
	groupsList, err := st.Groups(ctx, store.GroupQuery{})
	require.NoError(t, err)
	require.Len(t, groupsList, 1)
	g := groupsList[0]
	require.Empty(t, g.Pattern)
	require.Empty(t, g.SampleMessage)
	gid, err := store.ParseGroupID(g.ID)
	require.NoError(t, err)
	text, err := ring.OpenBlob(store.GroupRef(gid), crypt.FieldText, g.Sealed)
	require.NoError(t, err)
	pattern, sample, err := store.OpenGroupText(text)
	require.NoError(t, err)
	require.Equal(t, "card "+marker+" declined", sample)
	require.Equal(t, store.NormalizeFailure(sample), pattern)
	require.NotEqual(t, store.GroupIDOf("orders", "rejected", "CardError", in.FailureMessage), g.ID, "the group id is keyed")
}

// TestSealedHeaders: with a list of sealed headers the others stay in the
// headers column, and merging gives back the stored JSON byte for byte.
func TestSealedHeaders(t *testing.T) {
	t.Parallel()
	ring := newRing(t, newKey(t, "k1"))
	seal := func(h string) bool { return h == "authorization" }
	st := openStore(t, dlqtest.Schema(t), ring, seal)
	in := sealedMsg("orders", 1)
	in.Headers = json.RawMessage(`{"authorization":"Bearer ` + marker + `","x-death":[],"x-num":{"type":"int32","value":7},"x-tenant":"acme"}`)
	ingest(t, st, in)
	m, err := st.GetMessage(context.Background(), 1, nil)
	require.NoError(t, err)
	require.Equal(t, `{"x-death":[],"x-num":{"type":"int32","value":7},"x-tenant":"acme"}`, string(m.Headers))
	_, headers, _ := open(t, ring, m)
	require.Equal(t, string(in.Headers), string(headers))

	// A table the codec wrapped (a key in base64) is sealed whole.
	in = sealedMsg("orders", 2)
	in.Headers = json.RawMessage(`{"type":"table","encoding":"base64","value":{"/w==":"x"}}`)
	ingest(t, st, in)
	m, err = st.GetMessage(context.Background(), 2, nil)
	require.NoError(t, err)
	require.Equal(t, `{}`, string(m.Headers))
	_, headers, _ = open(t, ring, m)
	require.Equal(t, string(in.Headers), string(headers))
}

// TestSealedReturnToRecord: a replayed message that died again comes
// back to its sealed record, sealed again under a new data key; another
// body with the same x-dlq-id is a new row.
func TestSealedReturnToRecord(t *testing.T) {
	t.Parallel()
	ring := newRing(t, newKey(t, "k1"))
	st := openStore(t, dlqtest.Schema(t), ring, nil)
	ctx := context.Background()
	first := sealedMsg("orders", 1)
	ingest(t, st, first)
	before, err := st.GetMessage(ctx, 1, nil)
	require.NoError(t, err)

	again := sealedMsg("orders", 2)
	again.DLQID, again.ReplayID, again.ReplayCount = 1, "r-1", 1
	again.Headers = json.RawMessage(`{"authorization":"Bearer ` + marker + `","x-death":[],"x-tenant":"acme-43"}`)
	_, res := ingest(t, st, again)
	require.Equal(t, 1, res.Returned)
	after, err := st.GetMessage(ctx, 1, nil)
	require.NoError(t, err)
	require.NotEqual(t, before.Sealed.Envelope.DEK, after.Sealed.Envelope.DEK, "sealed again under a new data key")
	_, headers, body := open(t, ring, after)
	require.Contains(t, string(headers), "acme-43")
	require.Equal(t, first.Body, body)

	other := sealedMsg("orders", 3)
	other.Body = []byte("another body")
	other.DLQID, other.ReplayID = 1, "r-2"
	_, res = ingest(t, st, other)
	require.Equal(t, 1, res.Inserted, "a different body is not the record's message")
}

// TestSealedRedelivery: redelivery matching works on keyed fingerprints.
func TestSealedRedelivery(t *testing.T) {
	t.Parallel()
	ring := newRing(t, newKey(t, "k1"))
	dsn := dlqtest.Schema(t)
	st := openStore(t, dsn, ring, nil)
	ingest(t, st, sealedMsg("orders", 99))
	re := sealedMsg("orders", 99)
	re.Redelivered = true
	_, res := ingest(t, st, re)
	require.Equal(t, 1, res.Duplicates)
	require.Equal(t, 0, count(t, dlqtest.DB(t, dsn), "fingerprint = 99"), "the stored fingerprint is keyed")
}

// TestPlainAndSealedRowsTogether: rows stored before encryption was
// turned on stay readable and searchable; sealed rows next to them too.
func TestPlainAndSealedRowsTogether(t *testing.T) {
	t.Parallel()
	dsn := dlqtest.Schema(t)
	plain := openStore(t, dsn, nil, nil)
	ingest(t, plain, sealedMsg("orders", 1))
	ring := newRing(t, newKey(t, "k1"))
	sealed := openStore(t, dsn, ring, nil)
	ingest(t, sealed, sealedMsg("orders", 2))
	page, err := sealed.ListMessages(context.Background(), store.Filter{Query: "mid-" + marker}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 2)
	require.NotNil(t, page.Messages[0].Sealed, "newest first: the sealed one")
	require.Nil(t, page.Messages[1].Sealed)
}

func TestCheckKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	st1 := openStore(t, dsn, newRing(t, k1), nil)
	ingest(t, st1, sealedMsg("orders", 1), sealedMsg("orders", 2))
	require.NoError(t, st1.CheckKeys(ctx, []string{"k1"}))

	// k1 removed while it wraps two messages, a group and the index key.
	err := st1.CheckKeys(ctx, []string{"k2"})
	var missing *store.MissingKeysError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, []store.KeyUse{{KeyID: "k1", Messages: 2, Groups: 1, Index: true}}, missing.Uses)
	require.ErrorContains(t, err, "encryption key k1 still wraps 2 messages, 1 failure groups, 0 edits, the index key")
	err = st1.CheckKeys(ctx, nil)
	require.ErrorAs(t, err, &missing, "encryption turned off while sealed rows exist")

	// Rekey under k2, then k1 can go, and is forgotten.
	st2 := openStore(t, dsn, newRing(t, k2, k1), nil)
	lease := rekeyLease(t, st2)
	res, err := st2.RekeyMessages(ctx, lease, 0, 100)
	require.NoError(t, err)
	require.Equal(t, 2, res.Rewrapped)
	require.True(t, res.Done)
	n, skipped, err := st2.RekeyRest(ctx, lease)
	require.NoError(t, err)
	require.Empty(t, skipped)
	require.Equal(t, 2, n, "the group's text and the index key")
	require.NoError(t, st2.CheckKeys(ctx, []string{"k2"}))
	var used []string
	rows, err := dlqtest.DB(t, dsn).Query(ctx, `SELECT key_id FROM encryption_keys_used ORDER BY 1`)
	require.NoError(t, err)
	for rows.Next() {
		var k string
		require.NoError(t, rows.Scan(&k))
		used = append(used, k)
	}
	require.Equal(t, []string{"k2"}, used)

	// Only k2 now: everything opens.
	st3 := openStore(t, dsn, newRing(t, k2), nil)
	m, err := st3.GetMessage(ctx, 1, nil)
	require.NoError(t, err)
	_, _, body := open(t, newRing(t, k2), m)
	require.Contains(t, string(body), marker)
	page, err := st3.ListMessages(ctx, store.Filter{Query: "mid-" + marker}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 2, "the index key survived rotation: search keys still match")
}

func rekeyLease(t *testing.T, st *store.Store) store.Lease {
	t.Helper()
	run, ok, err := st.BeginJobRun(context.Background(), "rekey", "test", time.Now().UTC().Truncate(time.Millisecond), time.Minute)
	require.NoError(t, err)
	require.True(t, ok)
	return run.Lease
}

// TestRekeySealsPlainRows: rows stored in plain text are sealed by rekey,
// their keys turned into keyed hashes, their failure text out of the
// death history.
func TestRekeySealsPlainRows(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	plain := openStore(t, dsn, nil, nil)
	ingest(t, plain, sealedMsg("orders", 1))
	again := sealedMsg("orders", 2)
	again.DLQID, again.ReplayID = 1, "r1"
	ingest(t, plain, again) // a death history entry with the failure message
	ring := newRing(t, newKey(t, "k1"))
	st := openStore(t, dsn, ring, nil)
	lease := rekeyLease(t, st)
	res, err := st.RekeyMessages(ctx, lease, 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.Sealed)
	_, _, err = st.RekeyRest(ctx, lease)
	require.NoError(t, err)
	var row, groups string
	require.NoError(t, dlqtest.DB(t, dsn).QueryRow(ctx, `SELECT d::text FROM dead_messages d`).Scan(&row))
	require.NotContains(t, row, marker)
	require.NoError(t, dlqtest.DB(t, dsn).QueryRow(ctx, `SELECT string_agg(g::text, '') FROM failure_groups g`).Scan(&groups))
	require.NotContains(t, groups, marker)
	m, err := st.GetMessage(ctx, 1, nil)
	require.NoError(t, err)
	meta, _, body := open(t, ring, m)
	require.Contains(t, string(meta.Properties), "mid-"+marker)
	require.Contains(t, string(body), marker)
	page, err := st.ListMessages(ctx, store.Filter{Query: "mid-" + marker}, store.ListOptions{})
	require.NoError(t, err)
	require.Len(t, page.Messages, 1)
}

// TestRekeySkipsWhatItCannotRead: a row under a missing key, or one that
// does not authenticate, is left as it is and listed; the rest goes on.
func TestRekeySkipsWhatItCannotRead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	ingest(t, openStore(t, dsn, newRing(t, k1), nil), sealedMsg("orders", 1), sealedMsg("orders", 2), sealedMsg("orders", 3))
	st := openStore(t, dsn, newRing(t, k2, k1), nil)
	// Row 1 as sealed under a key no configuration has; row 3 changed.
	_, err := dlqtest.DB(t, dsn).Exec(ctx, `UPDATE dead_messages SET enc_key_id = 'k0' WHERE id = 1`)
	require.NoError(t, err)
	_, err = dlqtest.DB(t, dsn).Exec(ctx, `UPDATE dead_messages SET enc_dek = set_byte(enc_dek, 20, get_byte(enc_dek, 20) # 1) WHERE id = 3`)
	require.NoError(t, err)
	res, err := st.RekeyMessages(ctx, rekeyLease(t, st), 0, 10)
	require.NoError(t, err)
	require.Equal(t, 1, res.Rewrapped)
	require.Len(t, res.Skipped, 2)
	var missing *crypt.MissingKeyError
	require.ErrorAs(t, res.Skipped[0].Err, &missing)
	require.Equal(t, "k0", missing.KeyID)
	require.ErrorIs(t, res.Skipped[1].Err, crypt.ErrTampered)
	ids, err := st.MessagesUnderKey(ctx, "k0", 0, 10)
	require.NoError(t, err)
	require.Equal(t, []int64{1}, ids)
}

// TestRekeyIsFenced: a rekey batch under a lease that moved on writes
// nothing.
func TestRekeyIsFenced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	dsn := dlqtest.Schema(t)
	k1, k2 := newKey(t, "k1"), newKey(t, "k2")
	ingest(t, openStore(t, dsn, newRing(t, k1), nil), sealedMsg("orders", 1))
	st := openStore(t, dsn, newRing(t, k2, k1), nil)
	lease := rekeyLease(t, st)
	lease.Token++
	_, err := st.RekeyMessages(ctx, lease, 0, 10)
	require.ErrorIs(t, err, store.ErrLeaseLost)
	require.Equal(t, 1, count(t, dlqtest.DB(t, dsn), "enc_key_id = 'k1'"))
}

func TestSealedEdit(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	ring := newRing(t, newKey(t, "k1"))
	st := openStore(t, dlqtest.Schema(t), ring, nil)
	ingest(t, st, sealedMsg("orders", 1))
	edit := []byte(`{"body":"` + marker + `","replay_id":"r"}`)
	task, err := st.CreateReplayTask(ctx, store.NewReplayTask{Selection: store.Filter{IDs: []int64{1}, Status: "all"}, MaxItems: 10,
		Request: json.RawMessage(`{}`), Actor: store.Actor{Name: "t"},
		Edit: &store.NewEdit{MessageID: 1, Edit: edit, CopyReplayID: "r"}})
	require.NoError(t, err)
	blob, ok := store.SealedEdit(task.Edit)
	require.True(t, ok)
	require.False(t, bytes.Contains(task.Edit, []byte(marker)))
	got, err := ring.OpenBlob(store.TaskRef(task.ID), crypt.FieldEdit, blob)
	require.NoError(t, err)
	require.Equal(t, string(edit), string(got))
}

func FuzzParseSealedMeta(f *testing.F) {
	f.Add(store.SealedMeta{Properties: []byte(`{}`), Headers: []byte(`{"a":1}`)}.Append(nil))
	f.Add([]byte{1, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := store.ParseSealedMeta(b)
		if err == nil && !bytes.Equal(m.Append(nil), b) && len(m.Failure) != 0 {
			t.Fatalf("%q does not encode back", b)
		}
	})
}
