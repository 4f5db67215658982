package crypt

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/secrets"
)

func randomSecret(t testing.TB) []byte {
	b := make([]byte, KeySize)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

func testKey(t testing.TB, id string) Key {
	k, err := NewKey(id, randomSecret(t))
	require.NoError(t, err)
	return k
}

func testRing(t testing.TB, keys ...Key) *Ring {
	r, err := NewRing(keys)
	require.NoError(t, err)
	return r
}

func keyText(t testing.TB, id string) (string, []byte) {
	s := randomSecret(t)
	return id + ":" + base64.StdEncoding.EncodeToString(s), s
}

func TestParseKeys(t *testing.T) {
	t.Parallel()
	a, sa := keyText(t, "2025-q1")
	b, _ := keyText(t, "old_key.1")
	keys, err := ParseKeys(a + ", " + b)
	require.NoError(t, err)
	require.Len(t, keys, 2)
	require.Equal(t, "2025-q1", keys[0].ID)
	require.Equal(t, sa, keys[0].secret)

	keys, err = ParseKeys("# rotated 2025-04-01\n" + a + "\n\n" + b + "\n")
	require.NoError(t, err)
	require.Len(t, keys, 2)

	// Unpadded and URL-safe base64 are accepted too.
	raw := base64.RawURLEncoding.EncodeToString(randomSecret(t))
	keys, err = ParseKeys("k:" + raw)
	require.NoError(t, err)
	require.Len(t, keys, 1)
}

func TestParseKeysErrorsNeverShowSecrets(t *testing.T) {
	t.Parallel()
	good, _ := keyText(t, "k1")
	secret := base64.StdEncoding.EncodeToString(randomSecret(t))
	short := base64.StdEncoding.EncodeToString(randomSecret(t)[:31])
	for _, c := range []struct{ in, want, hidden string }{
		{secret, "encryption key 1 is not id:base64", secret},
		{good + "," + "k2:" + short, "encryption key 2 (id k2): the secret must be the base64 of 32 bytes, not of 31", short},
		{"k 1:" + secret, `id "k 1" must be`, secret},
		{"k1:" + secret + ",k1:" + base64.StdEncoding.EncodeToString(randomSecret(t)), "id k1 is listed twice", secret},
		{"a:" + secret + ",b:" + secret, "keys a and b have the same secret", secret},
		{"k1:not base64!!", "not valid base64", "not base64"},
	} {
		_, err := ParseKeys(c.in)
		require.ErrorContains(t, err, c.want)
		require.NotContains(t, err.Error(), c.hidden)
	}
}

func TestKeyNeverPrintsItsSecret(t *testing.T) {
	t.Parallel()
	k := testKey(t, "k1")
	enc := base64.StdEncoding.EncodeToString(k.secret)
	var logged bytes.Buffer
	slog.New(slog.NewTextHandler(&logged, nil)).Info("key", "key", k, "keys", []Key{k})
	for _, s := range []string{fmt.Sprint(k), fmt.Sprintf("%v %+v %#v %s %x %d %q", k, k, k, k, k, k, k), fmt.Sprint([]Key{k}), logged.String()} {
		require.Contains(t, s, "k1")
		require.NotContains(t, s, enc)
		require.NotContains(t, s, fmt.Sprint(k.secret[:4]))
		require.NotContains(t, s, fmt.Sprintf("%x", k.secret[:4]))
	}
}

func TestLoadKeys(t *testing.T) {
	t.Parallel()
	a, _ := keyText(t, "a")
	_, err := LoadKeys("", "")
	require.ErrorIs(t, err, ErrNoKeys)
	_, err = LoadKeys(a, "/x")
	require.ErrorContains(t, err, "not both")

	p := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(p, []byte(a+"\n"), 0o600))
	keys, err := LoadKeys("", p)
	require.NoError(t, err)
	require.Equal(t, "a", keys[0].ID)

	require.NoError(t, os.Chmod(p, 0o644))
	_, err = LoadKeys("", p)
	require.ErrorIs(t, err, secrets.ErrExposed)
	require.ErrorContains(t, err, "DLQ_ENCRYPTION_KEYS_FILE")

	empty := filepath.Join(t.TempDir(), "keys")
	require.NoError(t, os.WriteFile(empty, []byte("# none yet\n"), 0o600))
	_, err = LoadKeys("", empty)
	require.ErrorContains(t, err, "holds no key")
}

func TestSealOpenRoundTrip(t *testing.T) {
	t.Parallel()
	r := testRing(t, testKey(t, "k1"))
	s, err := r.NewSealer()
	require.NoError(t, err)
	ref := Ref{Table: "dead_messages", Row: 42}
	for _, pt := range [][]byte{nil, {}, []byte("hello"), bytes.Repeat([]byte{0, 0xff}, 70000)} {
		body := s.Seal(nil, ref, FieldBody, pt)
		meta := s.Seal(nil, ref, FieldMeta, pt)
		require.NotEqual(t, body, meta, "two fields of one row never share a nonce")
		got, err := r.Open(s.Envelope(), ref, FieldBody, body)
		require.NoError(t, err)
		require.Equal(t, len(pt), len(got))
		require.True(t, bytes.Equal(pt, got))
	}
	require.Equal(t, "k1", s.Envelope().KeyID)
}

func TestSealedValueBoundToItsRowAndField(t *testing.T) {
	t.Parallel()
	r := testRing(t, testKey(t, "k1"))
	ref := Ref{Table: "dead_messages", Row: 7}
	s1, err := r.NewSealer()
	require.NoError(t, err)
	body := s1.Seal(nil, ref, FieldBody, []byte("card 4111111111111111"))

	cases := map[string]func() ([]byte, error){
		"another row": func() ([]byte, error) {
			return r.Open(s1.Envelope(), Ref{Table: "dead_messages", Row: 8}, FieldBody, body)
		},
		"another table": func() ([]byte, error) {
			return r.Open(s1.Envelope(), Ref{Table: "failure_groups", Row: 7}, FieldBody, body)
		},
		"another field": func() ([]byte, error) { return r.Open(s1.Envelope(), ref, FieldMeta, body) },
		"one bit flipped": func() ([]byte, error) {
			b := bytes.Clone(body)
			b[3] ^= 1
			return r.Open(s1.Envelope(), ref, FieldBody, b)
		},
		"cut short": func() ([]byte, error) { return r.Open(s1.Envelope(), ref, FieldBody, body[:len(body)-1]) },
		"another row's envelope": func() ([]byte, error) {
			s2, err := r.NewSealer()
			require.NoError(t, err)
			return r.Open(s2.Envelope(), ref, FieldBody, body)
		},
		"wrapped key changed": func() ([]byte, error) {
			env := s1.Envelope()
			env.DEK = bytes.Clone(env.DEK)
			env.DEK[20] ^= 0x80
			return r.Open(env, ref, FieldBody, body)
		},
		"nonce changed": func() ([]byte, error) {
			env := s1.Envelope()
			env.Nonce = bytes.Clone(env.Nonce)
			env.Nonce[5] ^= 1
			return r.Open(env, ref, FieldBody, body)
		},
		"nonce cut": func() ([]byte, error) {
			env := s1.Envelope()
			env.Nonce = env.Nonce[:4]
			return r.Open(env, ref, FieldBody, body)
		},
	}
	for name, open := range cases {
		_, err := open()
		require.ErrorIs(t, err, ErrTampered, name)
	}
}

func TestWrongOrMissingKey(t *testing.T) {
	t.Parallel()
	k1 := testKey(t, "k1")
	r := testRing(t, k1)
	s, err := r.NewSealer()
	require.NoError(t, err)
	ref := Ref{Table: "dead_messages", Row: 1}
	ct := s.Seal(nil, ref, FieldBody, []byte("x"))

	// Same id, different secret: the wrapped data key does not open.
	wrong := testRing(t, testKey(t, "k1"))
	_, err = wrong.Open(s.Envelope(), ref, FieldBody, ct)
	require.ErrorIs(t, err, ErrTampered)

	// Key not in the ring.
	other := testRing(t, testKey(t, "k2"))
	_, err = other.Open(s.Envelope(), ref, FieldBody, ct)
	var missing *MissingKeyError
	require.ErrorAs(t, err, &missing)
	require.Equal(t, "k1", missing.KeyID)
	require.Contains(t, err.Error(), `"k1" is not configured`)
}

func TestRotation(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(t, "k1"), testKey(t, "k2")
	old := testRing(t, k1)
	s, err := old.NewSealer()
	require.NoError(t, err)
	ref := Ref{Table: "dead_messages", Row: 3}
	ct := s.Seal(nil, ref, FieldBody, []byte("payload"))

	// k2 in front: new data keys under k2; k1 still opens old rows.
	both := testRing(t, k2, k1)
	require.Equal(t, "k2", both.Active())
	require.Equal(t, []string{"k2", "k1"}, both.KeyIDs())
	got, err := both.Open(s.Envelope(), ref, FieldBody, ct)
	require.NoError(t, err)
	require.Equal(t, "payload", string(got))
	s2, err := both.NewSealer()
	require.NoError(t, err)
	require.Equal(t, "k2", s2.Envelope().KeyID)

	// Rewrap: same ciphertext, envelope under k2; then k1 can go.
	env, err := both.Rewrap(s.Envelope())
	require.NoError(t, err)
	require.Equal(t, "k2", env.KeyID)
	require.Equal(t, s.Envelope().Nonce, env.Nonce)
	only2 := testRing(t, k2)
	got, err = only2.Open(env, ref, FieldBody, ct)
	require.NoError(t, err)
	require.Equal(t, "payload", string(got))
	same, err := both.Rewrap(env)
	require.NoError(t, err)
	require.Equal(t, env, same)

	_, err = only2.Rewrap(s.Envelope())
	var missing *MissingKeyError
	require.ErrorAs(t, err, &missing)
}

func TestBlob(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(t, "k1"), testKey(t, "k2")
	r1 := testRing(t, k1)
	ref := Ref{Table: "failure_groups", Row: -5}
	blob, err := r1.SealBlob(ref, FieldText, []byte("user bob@example.com not found"))
	require.NoError(t, err)
	id, err := BlobKeyID(blob)
	require.NoError(t, err)
	require.Equal(t, "k1", id)
	got, err := r1.OpenBlob(ref, FieldText, blob)
	require.NoError(t, err)
	require.Equal(t, "user bob@example.com not found", string(got))
	_, err = r1.OpenBlob(Ref{Table: "failure_groups", Row: 5}, FieldText, blob)
	require.ErrorIs(t, err, ErrTampered)

	r21 := testRing(t, k2, k1)
	re, err := r21.RewrapBlob(blob)
	require.NoError(t, err)
	id, _ = BlobKeyID(re)
	require.Equal(t, "k2", id)
	got, err = testRing(t, k2).OpenBlob(ref, FieldText, re)
	require.NoError(t, err)
	require.Equal(t, "user bob@example.com not found", string(got))

	for _, bad := range [][]byte{nil, {'S'}, {'S', 1, 0}, {'X', 1, 2, 'k', '1'}, blob[:10]} {
		_, err := r1.OpenBlob(ref, FieldText, bad)
		require.ErrorIs(t, err, ErrTampered)
	}
}

func TestIndex(t *testing.T) {
	t.Parallel()
	k1, k2 := testKey(t, "k1"), testKey(t, "k2")
	r1 := testRing(t, k1)
	x, keyID, wrapped, err := r1.NewIndex()
	require.NoError(t, err)
	require.Equal(t, "k1", keyID)
	again, err := r1.OpenIndex(keyID, wrapped)
	require.NoError(t, err)
	require.Equal(t, x.Key("order-4711"), again.Key("order-4711"))
	require.NotEqual(t, x.Key("order-4711"), x.Key("order-4712"))
	require.Equal(t, []int64{x.Key("a"), x.Key("b")}, x.Keys([]string{"a", "b"}))
	require.Nil(t, x.Keys(nil))
	require.NotEqual(t, x.Fingerprint(1), x.Group(1), "domains are apart")
	require.NotZero(t, x.Group(0))

	// Another index key hashes differently: the hashes are keyed.
	y, _, _, err := r1.NewIndex()
	require.NoError(t, err)
	require.NotEqual(t, x.Key("order-4711"), y.Key("order-4711"))

	// Rotation re-wraps the index key; its hashes stay the same.
	r21 := testRing(t, k2, k1)
	id2, w2, err := r21.RewrapIndex(keyID, wrapped)
	require.NoError(t, err)
	require.Equal(t, "k2", id2)
	z, err := testRing(t, k2).OpenIndex(id2, w2)
	require.NoError(t, err)
	require.Equal(t, x.Key("order-4711"), z.Key("order-4711"))

	_, err = testRing(t, k2).OpenIndex(keyID, wrapped)
	var missing *MissingKeyError
	require.ErrorAs(t, err, &missing)
	bad := bytes.Clone(wrapped)
	bad[15] ^= 1
	_, err = r1.OpenIndex(keyID, bad)
	require.ErrorIs(t, err, ErrTampered)
}

func TestNewRingRefusesDuplicates(t *testing.T) {
	t.Parallel()
	_, err := NewRing(nil)
	require.True(t, errors.Is(err, ErrNoKeys))
	k := testKey(t, "k1")
	_, err = NewRing([]Key{k, k})
	require.ErrorContains(t, err, "listed twice")
	_, err = NewKey("bad id", randomSecret(t))
	require.Error(t, err)
	_, err = NewKey("k", make([]byte, 16))
	require.ErrorContains(t, err, "32 bytes")
	require.False(t, strings.Contains(fmt.Sprint(k), "secret"))
}
