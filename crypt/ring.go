package crypt

import (
	"crypto/aes"
	"crypto/cipher"
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
)

// Sizes of an envelope's parts.
const (
	NonceSize      = 12
	tagSize        = 16
	WrappedKeySize = NonceSize + KeySize + tagSize
)

// ErrTampered means a sealed value did not authenticate: its bytes were
// changed, or it was copied from another row or field, or its envelope
// does not belong to it.
var ErrTampered = errors.New("sealed value does not authenticate: tampered with, or moved from another row or field")

// MissingKeyError is the error for a value sealed under a key the ring
// does not hold.
type MissingKeyError struct{ KeyID string }

func (e *MissingKeyError) Error() string {
	return fmt.Sprintf("encryption key %q is not configured (DLQ_ENCRYPTION_KEYS): add it back to read this value", e.KeyID)
}

// Field names which value of a row a ciphertext is. It is part of the
// associated data and of the nonce, so every field of a row has its own.
type Field uint8

// The sealed fields.
const (
	FieldBody Field = 1 // a dead message's body
	FieldMeta Field = 2 // a dead message's properties, sealed headers and failure
	FieldText Field = 3 // a failure group's pattern and sample
	FieldEdit Field = 4 // an edit-then-replay's new body and headers
)

// Ref is where a sealed value lives: the table and the row. With the
// Field it is the value's associated data.
type Ref struct {
	Table string
	Row   int64
}

// aad renders the associated data of a value of ref's row.
func (ref Ref) aad(dst []byte, f Field) []byte {
	dst = append(dst, "dlq1\x00"...)
	dst = append(dst, ref.Table...)
	dst = append(dst, 0, byte(f))
	return binary.BigEndian.AppendUint64(dst, uint64(ref.Row))
}

// Envelope is what a sealed row stores beside its ciphertexts: the id of
// the key-encryption key, the row's data key wrapped by it, and the base
// nonce of the row's fields.
type Envelope struct {
	KeyID string
	DEK   []byte
	Nonce []byte
}

type kek struct {
	id   string
	aead cipher.AEAD
}

// Ring holds the key-encryption keys: the first one wraps new data keys,
// all of them unwrap. It is safe for concurrent use and never changes.
type Ring struct {
	keys []kek
}

// NewRing makes a ring of keys, the first one active.
func NewRing(keys []Key) (*Ring, error) {
	if len(keys) == 0 {
		return nil, ErrNoKeys
	}
	r := &Ring{}
	for _, k := range keys {
		if slices.ContainsFunc(r.keys, func(o kek) bool { return o.id == k.ID }) {
			return nil, fmt.Errorf("crypt: key id %s is listed twice", k.ID)
		}
		a, err := newAEAD(k.secret)
		if err != nil {
			return nil, fmt.Errorf("crypt: key %s: %w", k.ID, err)
		}
		r.keys = append(r.keys, kek{id: k.ID, aead: a})
	}
	return r, nil
}

func newAEAD(key []byte) (cipher.AEAD, error) {
	b, err := aes.NewCipher(key)
	if err != nil {
		return nil, err
	}
	return cipher.NewGCM(b)
}

// Active is the id of the key that wraps new data keys.
func (r *Ring) Active() string { return r.keys[0].id }

// KeyIDs lists the keys' ids, the active one first.
func (r *Ring) KeyIDs() []string {
	ids := make([]string, len(r.keys))
	for i, k := range r.keys {
		ids[i] = k.id
	}
	return ids
}

// Has reports whether the ring holds key id.
func (r *Ring) Has(id string) bool { return r.kek(id) != nil }

func (r *Ring) kek(id string) *kek {
	for i := range r.keys {
		if r.keys[i].id == id {
			return &r.keys[i]
		}
	}
	return nil
}

func dekAAD(keyID string) []byte { return append([]byte("dlq1-dek\x00"), keyID...) }

// wrap seals secret under k with associated data aad: nonce | ciphertext.
func (k *kek) wrap(secret, nonce, aad []byte) []byte {
	out := make([]byte, 0, NonceSize+len(secret)+tagSize)
	out = append(out, nonce...)
	return k.aead.Seal(out, nonce, secret, aad)
}

func (k *kek) unwrap(wrapped, aad []byte) ([]byte, error) {
	if len(wrapped) != WrappedKeySize {
		return nil, fmt.Errorf("crypt: wrapped key of %d bytes, want %d: %w", len(wrapped), WrappedKeySize, ErrTampered)
	}
	secret, err := k.aead.Open(nil, wrapped[:NonceSize], wrapped[NonceSize:], aad)
	if err != nil {
		return nil, fmt.Errorf("crypt: data key under key %s: %w", k.id, ErrTampered)
	}
	return secret, nil
}

// Sealer seals the fields of one row under the row's own data key.
type Sealer struct {
	env  Envelope
	aead cipher.AEAD
}

// NewSealer makes a fresh data key and nonce for one row, wrapped under
// the active key.
func (r *Ring) NewSealer() (*Sealer, error) {
	var buf [KeySize + 2*NonceSize]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return nil, fmt.Errorf("crypt: random data key: %w", err)
	}
	dek, nonce, wrapNonce := buf[:KeySize], buf[KeySize:KeySize+NonceSize], buf[KeySize+NonceSize:]
	a, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	k := &r.keys[0]
	return &Sealer{
		env:  Envelope{KeyID: k.id, DEK: k.wrap(dek, wrapNonce, dekAAD(k.id)), Nonce: append([]byte(nil), nonce...)},
		aead: a,
	}, nil
}

// Envelope is what the row must store to be opened again.
func (s *Sealer) Envelope() Envelope { return s.env }

// Seal appends the ciphertext of field f of ref's row to dst.
func (s *Sealer) Seal(dst []byte, ref Ref, f Field, plaintext []byte) []byte {
	var nb [NonceSize]byte
	var ab [64]byte
	return s.aead.Seal(dst, fieldNonce(&nb, s.env.Nonce, f), plaintext, ref.aad(ab[:0], f))
}

// fieldNonce is the row's base nonce with the field in its first byte:
// the fields of a row, which share its data key, never share a nonce.
func fieldNonce(dst *[NonceSize]byte, base []byte, f Field) []byte {
	copy(dst[:], base)
	dst[0] ^= byte(f)
	return dst[:]
}

// RowKey opens the fields of one row.
type RowKey struct {
	nonce []byte
	aead  cipher.AEAD
}

// Unwrap checks env and unwraps its data key: a *MissingKeyError when the
// ring lacks the key, ErrTampered when the envelope does not
// authenticate.
func (r *Ring) Unwrap(env Envelope) (*RowKey, error) {
	k := r.kek(env.KeyID)
	if k == nil {
		return nil, &MissingKeyError{KeyID: env.KeyID}
	}
	if len(env.Nonce) != NonceSize {
		return nil, fmt.Errorf("crypt: nonce of %d bytes, want %d: %w", len(env.Nonce), NonceSize, ErrTampered)
	}
	dek, err := k.unwrap(env.DEK, dekAAD(env.KeyID))
	if err != nil {
		return nil, err
	}
	a, err := newAEAD(dek)
	if err != nil {
		return nil, err
	}
	return &RowKey{nonce: env.Nonce, aead: a}, nil
}

// Open appends the plaintext of field f of ref's row to dst.
func (k *RowKey) Open(dst []byte, ref Ref, f Field, ciphertext []byte) ([]byte, error) {
	var nb [NonceSize]byte
	var ab [64]byte
	out, err := k.aead.Open(dst, fieldNonce(&nb, k.nonce, f), ciphertext, ref.aad(ab[:0], f))
	if err != nil {
		return nil, fmt.Errorf("crypt: %s row %d field %d: %w", ref.Table, ref.Row, f, ErrTampered)
	}
	return out, nil
}

// Matches reports whether ciphertext, field f of ref's row, seals
// plaintext: a comparison that hands the caller no plain text.
func (k *RowKey) Matches(ref Ref, f Field, ciphertext, plaintext []byte) bool {
	got, err := k.Open(nil, ref, f, ciphertext)
	return err == nil && subtle.ConstantTimeCompare(got, plaintext) == 1 && len(got) == len(plaintext)
}

// Open is Unwrap then RowKey.Open, for one field.
func (r *Ring) Open(env Envelope, ref Ref, f Field, ciphertext []byte) ([]byte, error) {
	k, err := r.Unwrap(env)
	if err != nil {
		return nil, err
	}
	return k.Open(nil, ref, f, ciphertext)
}

// Rewrap returns env with its data key wrapped by the active key; the
// row's ciphertexts stay valid as they are. An envelope already under the
// active key comes back unchanged.
func (r *Ring) Rewrap(env Envelope) (Envelope, error) {
	active := &r.keys[0]
	if env.KeyID == active.id {
		return env, nil
	}
	k := r.kek(env.KeyID)
	if k == nil {
		return Envelope{}, &MissingKeyError{KeyID: env.KeyID}
	}
	dek, err := k.unwrap(env.DEK, dekAAD(env.KeyID))
	if err != nil {
		return Envelope{}, err
	}
	var nonce [NonceSize]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return Envelope{}, fmt.Errorf("crypt: random nonce: %w", err)
	}
	return Envelope{KeyID: active.id, DEK: active.wrap(dek, nonce[:], dekAAD(active.id)), Nonce: env.Nonce}, nil
}
