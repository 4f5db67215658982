package security

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	amqp "github.com/rabbitmq/amqp091-go"
	"github.com/stretchr/testify/require"
)

func (d *deployment) exec(sql string, args ...any) {
	d.t.Helper()
	_, err := basePool(d.t).Exec(context.Background(), strings.ReplaceAll(sql, "SCHEMA", fmt.Sprintf("%q", d.schema)), args...)
	require.NoError(d.t, err)
}

func encryptionError(t *testing.T, m message) string {
	t.Helper()
	require.NotNil(t, m.Encryption, "message %d is flagged", m.ID)
	var e struct {
		KeyID string `json:"key_id"`
		Error string `json:"error"`
	}
	require.NoError(t, json.Unmarshal(*m.Encryption, &e))
	return e.Error
}

// TestWrongOrMissingKey: a start without a key that still wraps data, or
// with a key id given another secret, is refused with a clear error; a
// row whose key is missing (allowed at start) is flagged in every read,
// listed by `dlq rekey -status`, fails its replay with the reason, and
// never stops anything else.
func TestWrongOrMissingKey(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	k1 := newKey(t, "k1")
	d.env["DLQ_ENCRYPTION_KEYS"] = k1
	d.serve(nil)
	for i := range 3 {
		d.deadLetter(amqp.Publishing{MessageId: fmt.Sprint("m", i), Body: []byte(fmt.Sprint("body ", i))})
	}
	ms := d.waitMessages(3)
	d.stop()

	out, code := d.run(map[string]string{"DLQ_ENCRYPTION_KEYS": newKey(t, "k2")}, "serve")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "encryption key k1 still wraps 3 messages, 1 failure groups, 0 edits, the index key, but is not configured")

	out, code = d.run(map[string]string{"DLQ_ENCRYPTION_KEYS": ""}, "serve")
	require.NotEqual(t, 0, code, "turning encryption off while rows are sealed")
	require.Contains(t, out, "encryption key k1 still wraps 3 messages")

	out, code = d.run(map[string]string{"DLQ_ENCRYPTION_KEYS": newKey(t, "k1")}, "serve")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "does not authenticate")
	require.Contains(t, out, "is a key id given with another key's secret?")

	// One row sealed under a key no one has any more.
	lost := ms[0].ID
	d.exec(`UPDATE SCHEMA.dead_messages SET enc_key_id = 'lost' WHERE id = $1`, lost)
	d.exec(`INSERT INTO SCHEMA.encryption_keys_used (key_id) VALUES ('lost')`)
	out, code = d.run(nil, "serve")
	require.NotEqual(t, 0, code)
	require.Contains(t, out, "encryption key lost still wraps 1 messages")

	d.serve(map[string]string{"DLQ_ENCRYPTION_ALLOW_MISSING_KEYS": "true"})
	got := d.messages(tokAdmin, "")
	require.Len(t, got, 3, "the listing still answers")
	for _, m := range got {
		if m.ID == lost {
			require.Contains(t, encryptionError(t, m), `encryption key "lost" is not configured`)
			require.Nil(t, m.Body)
		} else {
			require.Empty(t, encryptionError(t, m))
			require.NotEmpty(t, m.Body)
		}
	}
	code, b := d.get(tokViewer, fmt.Sprintf("/api/v1/messages/%d", lost))
	require.Equal(t, http.StatusOK, code, string(b))
	require.Contains(t, string(b), `not configured`)
	task := d.replayTo(tokOperator, lost)
	require.EqualValues(t, 1, task["failed"], "%v", task)
	_, b = d.get(tokAdmin, fmt.Sprintf("/api/v1/messages/%d", lost))
	require.Contains(t, string(b), `"last_replay_error":"message`)
	require.Contains(t, string(b), `is not configured`)
	require.Equal(t, http.StatusOK, func() int { c, _ := d.get("", "/readyz"); return c }(), "nothing else stopped")
	d.stop()

	out, code = d.run(nil, "rekey", "-status")
	require.Equal(t, 0, code, out)
	require.Regexp(t, `lost\s+MISSING\s+1`, out)
	require.Contains(t, out, fmt.Sprintf("key lost is not configured; messages it leaves unreadable (first 1): [%d]", lost))
	out, code = d.run(nil, "rekey")
	require.Equal(t, 0, code, out)
	require.Contains(t, out, fmt.Sprintf("message %d left as it is", lost))
}

// TestTamperedOrSwappedCiphertext: a body changed in the database, or the
// sealed parts of two rows swapped, do not open: each message is flagged
// (the listing still answers), and a replay of it fails with the reason
// instead of sending anything.
func TestTamperedOrSwappedCiphertext(t *testing.T) {
	t.Parallel()
	d := newDeployment(t)
	d.env["DLQ_ENCRYPTION_KEYS"] = newKey(t, "k1")
	d.serve(nil)
	for i := range 3 {
		d.deadLetter(amqp.Publishing{MessageId: fmt.Sprint("m", i), Body: []byte(fmt.Sprint("body ", i))})
	}
	ms := d.waitMessages(3)
	a, b, c := ms[2].ID, ms[1].ID, ms[0].ID
	d.exec(`UPDATE SCHEMA.dead_messages x SET body = y.body, enc_key_id = y.enc_key_id, enc_dek = y.enc_dek, enc_nonce = y.enc_nonce, enc_meta = y.enc_meta
FROM SCHEMA.dead_messages y WHERE (x.id, y.id) IN (($1, $2), ($2, $1))`, a, b)
	d.exec(`UPDATE SCHEMA.dead_messages SET body = set_byte(body, 0, get_byte(body, 0) # 1) WHERE id = $1`, c)

	got := d.messages(tokAdmin, "")
	require.Len(t, got, 3)
	for _, m := range got {
		require.Contains(t, encryptionError(t, m), "does not authenticate", "message %d", m.ID)
		require.Nil(t, m.Body)
	}
	task := d.replayTo(tokOperator, a, b, c)
	require.EqualValues(t, 3, task["failed"], "%v", task)
	require.EqualValues(t, 0, task["published"])
	_, body := d.get(tokAdmin, fmt.Sprintf("/api/v1/messages/%d", c))
	require.Contains(t, string(body), "does not authenticate")
	code, _ := d.get("", "/readyz")
	require.Equal(t, http.StatusOK, code)
}
