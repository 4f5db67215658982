-- +goose NO TRANSACTION
-- +goose Up

-- NO TRANSACTION, so that each ALTER TABLE holds its table alone (as in
-- 00075); each statement runs again safely after an attempt that stopped
-- half way (rewritten so before the first release).

-- Encryption at rest (docs/SECURITY.md). With DLQ_ENCRYPTION_KEYS set, a
-- dead message's body, properties, chosen headers and failure details are
-- sealed with AES-256-GCM under a data key of the row's own, wrapped by
-- the configured key-encryption key (package crypt):
--   enc_key_id  the key-encryption key that wraps the row's data key;
--               NULL for a row stored in plain text (before encryption was
--               turned on, or with it off)
--   enc_dek     the row's data key, wrapped
--   enc_nonce   the base nonce of the row's sealed fields
--   enc_meta    properties, the sealed headers and the failure details,
--               sealed; body holds the sealed body
-- New nullable columns without a default: no row is rewritten, and a
-- database without keys never fills them.
ALTER TABLE dead_messages
    ADD COLUMN IF NOT EXISTS enc_key_id text,
    ADD COLUMN IF NOT EXISTS enc_dek bytea,
    ADD COLUMN IF NOT EXISTS enc_nonce bytea,
    ADD COLUMN IF NOT EXISTS enc_meta bytea;

-- A failure group's masked pattern and sample message come from failure
-- messages: sealed too (enc_text, a crypt blob), pattern and
-- sample_message then empty.
ALTER TABLE failure_groups
    ADD COLUMN IF NOT EXISTS enc_key_id text,
    ADD COLUMN IF NOT EXISTS enc_text bytea;

-- The index key: the secret of the keyed hashes (HMAC) that stand in for
-- search keys, content fingerprints and failure group ids in sealed rows,
-- so that a database reader cannot test guesses against them. Random,
-- made once, wrapped by a key-encryption key like a data key; rotation
-- re-wraps it and the hashes stay valid.
CREATE TABLE IF NOT EXISTS encryption_index (
    id           boolean     PRIMARY KEY DEFAULT true CHECK (id),
    key_id       text        NOT NULL,
    wrapped      bytea       NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT now(),
    rewrapped_at timestamptz
);

-- Every key-encryption key that ever wrapped anything here. dlq serve
-- refuses to start without a key listed here that still wraps data, and
-- counts that data only then: a start never scans dead_messages otherwise.
CREATE TABLE IF NOT EXISTS encryption_keys_used (
    key_id        text        PRIMARY KEY,
    first_used_at timestamptz NOT NULL DEFAULT now()
);

-- +goose Down
DROP TABLE IF EXISTS encryption_keys_used;
DROP TABLE IF EXISTS encryption_index;
ALTER TABLE failure_groups DROP COLUMN IF EXISTS enc_text, DROP COLUMN IF EXISTS enc_key_id;
ALTER TABLE dead_messages
    DROP COLUMN IF EXISTS enc_meta, DROP COLUMN IF EXISTS enc_nonce, DROP COLUMN IF EXISTS enc_dek, DROP COLUMN IF EXISTS enc_key_id;
