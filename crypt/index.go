package crypt

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"hash"
	"sync"
)

// Index computes the keyed hashes (HMAC-SHA-256, the first 8 bytes) that
// stand for values exact search and redelivery matching compare, where
// plain text or an unkeyed hash would let a database reader test guesses.
// It is safe for concurrent use.
type Index struct {
	pool sync.Pool
}

// Hash domains: a value hashed for one purpose never equals one hashed
// for another.
const (
	domainKey         = 'k'
	domainFingerprint = 'f'
	domainGroup       = 'g'
)

func indexAAD() []byte { return []byte("dlq1-index") }

func newIndex(secret []byte) *Index {
	key := append([]byte(nil), secret...)
	x := &Index{}
	x.pool.New = func() any { return &hasher{h: hmac.New(sha256.New, key), buf: make([]byte, 0, 160)} }
	return x
}

// NewIndex makes a random index key, wrapped under the active key for
// storing: the store keeps (keyID, wrapped) and opens it with OpenIndex.
func (r *Ring) NewIndex() (x *Index, keyID string, wrapped []byte, err error) {
	var buf [KeySize + NonceSize]byte
	if _, err := rand.Read(buf[:]); err != nil {
		return nil, "", nil, fmt.Errorf("crypt: random index key: %w", err)
	}
	k := &r.keys[0]
	return newIndex(buf[:KeySize]), k.id, k.wrap(buf[:KeySize], buf[KeySize:], indexAAD()), nil
}

// OpenIndex unwraps a stored index key.
func (r *Ring) OpenIndex(keyID string, wrapped []byte) (*Index, error) {
	k := r.kek(keyID)
	if k == nil {
		return nil, &MissingKeyError{KeyID: keyID}
	}
	secret, err := k.unwrap(wrapped, indexAAD())
	if err != nil {
		return nil, fmt.Errorf("crypt: index key: %w", err)
	}
	return newIndex(secret), nil
}

// RewrapIndex re-wraps a stored index key under the active key.
func (r *Ring) RewrapIndex(keyID string, wrapped []byte) (string, []byte, error) {
	active := &r.keys[0]
	if keyID == active.id {
		return keyID, wrapped, nil
	}
	k := r.kek(keyID)
	if k == nil {
		return "", nil, &MissingKeyError{KeyID: keyID}
	}
	secret, err := k.unwrap(wrapped, indexAAD())
	if err != nil {
		return "", nil, fmt.Errorf("crypt: index key: %w", err)
	}
	var nonce [NonceSize]byte
	if _, err := rand.Read(nonce[:]); err != nil {
		return "", nil, fmt.Errorf("crypt: random nonce: %w", err)
	}
	return active.id, active.wrap(secret, nonce[:], indexAAD()), nil
}

// hasher is one pooled HMAC with its scratch space, so that a hash
// allocates nothing: ingest computes up to 16 of them per message.
type hasher struct {
	h   hash.Hash
	buf []byte
	out [sha256.Size]byte
}

func (x *Index) sum(domain byte, a []byte, b string) int64 {
	hs := x.pool.Get().(*hasher)
	hs.h.Reset()
	hs.buf = append(append(append(hs.buf[:0], domain), a...), b...)
	hs.h.Write(hs.buf)
	s := hs.h.Sum(hs.out[:0])
	v := int64(binary.BigEndian.Uint64(s[:8]))
	x.pool.Put(hs)
	return v
}

// Key is the keyed hash of a search key (already cleaned and lower-cased
// by the caller).
func (x *Index) Key(key string) int64 { return x.sum(domainKey, nil, key) }

// Keys hashes each key, in order.
func (x *Index) Keys(keys []string) []int64 {
	if keys == nil {
		return nil
	}
	out := make([]int64, len(keys))
	for i, k := range keys {
		out[i] = x.Key(k)
	}
	return out
}

// Fingerprint is the keyed form of a content fingerprint.
func (x *Index) Fingerprint(fp int64) int64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(fp))
	return x.sum(domainFingerprint, b[:], "")
}

// Group is the keyed form of a failure group id (never 0, which means no
// group).
func (x *Index) Group(id int64) int64 {
	var b [8]byte
	binary.BigEndian.PutUint64(b[:], uint64(id))
	if g := x.sum(domainGroup, b[:], ""); g != 0 {
		return g
	}
	return 1
}
