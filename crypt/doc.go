// Package crypt is dlq's encryption at rest: the key ring, the envelopes
// sealed values travel in, and the keyed hashes that keep exact search
// working over encrypted data. It knows no SQL and no AMQP; package store
// seals what it writes with it, and only the places that show a value to
// a principal allowed to see it (package ops) or send it (package replay)
// open it again.
//
// # Keys
//
// Key-encryption keys (KEKs) come from configuration
// (DLQ_ENCRYPTION_KEYS or DLQ_ENCRYPTION_KEYS_FILE): "id:base64" of 32
// random bytes each. The first key of the list is the active one: it wraps
// every new data key. Every key of the list can unwrap. Rotating is adding
// a new key in front, then re-encrypting (dlq rekey), then removing the
// old key.
//
// # Envelopes
//
// Each row gets its own data key (DEK): 32 random bytes, used with
// AES-256-GCM for that row's fields only, and stored wrapped (AES-256-GCM
// under the active KEK) in the row's Envelope with the KEK's id and the
// row's base nonce. A per-row key costs about a microsecond per row
// (BenchmarkSealRow); docs/BENCHMARKS.md shows that this is lost in
// ingest's noise, so no data key is shared between rows and none needs
// caching.
//
// Every sealed value is bound to where it lives: its associated data is
// the table, the row id and the field (Ref). A ciphertext copied to
// another row, or to another field of its own row, fails to authenticate,
// exactly like a tampered one (ErrTampered). A row sealed under a key the
// ring does not hold fails with a *MissingKeyError naming the key; neither
// ever panics.
//
// Re-encrypting a row under a new KEK (Rewrap) re-wraps its data key and
// leaves its ciphertexts as they are: rotation reads and writes a few
// dozen bytes per row, whatever the body's size.
//
// Values that live outside dead_messages' envelope columns (a failure
// group's text, an edit waiting to be replayed) are sealed as blobs: the
// same envelope, encoded in front of the ciphertext.
//
// # Keyed hashes
//
// Exact search (message id, correlation id, header values) and the
// content fingerprints ingest compares use HMAC-SHA-256 under an index key
// instead of plain values or unkeyed hashes, so that a database reader
// cannot test guesses against them. The index key is random, stored in
// the database wrapped by a KEK like any data key (store), and never
// changes: rotation re-wraps it, and the hashes written under it stay
// valid.
package crypt
