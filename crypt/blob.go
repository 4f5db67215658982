package crypt

import (
	"fmt"
)

// A blob is a sealed value that carries its own envelope, for values
// stored outside dead_messages' envelope columns:
//
//	'S' | version 1 | key id length | key id | wrapped data key | nonce | ciphertext

const (
	blobMagic   = 'S'
	blobVersion = 1
)

// SealBlob seals plaintext as field f of ref's row under a fresh data
// key, envelope included.
func (r *Ring) SealBlob(ref Ref, f Field, plaintext []byte) ([]byte, error) {
	s, err := r.NewSealer()
	if err != nil {
		return nil, err
	}
	env := s.Envelope()
	out := appendEnvelope(make([]byte, 0, 3+len(env.KeyID)+WrappedKeySize+NonceSize+len(plaintext)+tagSize), env)
	return s.Seal(out, ref, f, plaintext), nil
}

func appendEnvelope(dst []byte, env Envelope) []byte {
	dst = append(dst, blobMagic, blobVersion, byte(len(env.KeyID)))
	dst = append(dst, env.KeyID...)
	dst = append(dst, env.DEK...)
	return append(dst, env.Nonce...)
}

// ParseBlob splits a blob into its envelope and ciphertext, without any
// key. A blob that is not one is ErrTampered.
func ParseBlob(blob []byte) (Envelope, []byte, error) {
	if len(blob) < 3 || blob[0] != blobMagic || blob[1] != blobVersion {
		return Envelope{}, nil, fmt.Errorf("crypt: not a sealed blob: %w", ErrTampered)
	}
	n := int(blob[2])
	rest := blob[3:]
	if n == 0 || len(rest) < n+WrappedKeySize+NonceSize+tagSize {
		return Envelope{}, nil, fmt.Errorf("crypt: sealed blob of %d bytes is cut short: %w", len(blob), ErrTampered)
	}
	env := Envelope{
		KeyID: string(rest[:n]),
		DEK:   rest[n : n+WrappedKeySize],
		Nonce: rest[n+WrappedKeySize : n+WrappedKeySize+NonceSize],
	}
	return env, rest[n+WrappedKeySize+NonceSize:], nil
}

// BlobKeyID is the id of the key a blob is sealed under.
func BlobKeyID(blob []byte) (string, error) {
	env, _, err := ParseBlob(blob)
	return env.KeyID, err
}

// OpenBlob opens a blob sealed as field f of ref's row.
func (r *Ring) OpenBlob(ref Ref, f Field, blob []byte) ([]byte, error) {
	env, ct, err := ParseBlob(blob)
	if err != nil {
		return nil, err
	}
	return r.Open(env, ref, f, ct)
}

// RewrapBlob re-wraps a blob's data key under the active key.
func (r *Ring) RewrapBlob(blob []byte) ([]byte, error) {
	env, ct, err := ParseBlob(blob)
	if err != nil {
		return nil, err
	}
	if env, err = r.Rewrap(env); err != nil {
		return nil, err
	}
	out := appendEnvelope(make([]byte, 0, 3+len(env.KeyID)+WrappedKeySize+NonceSize+len(ct)), env)
	return append(out, ct...), nil
}
