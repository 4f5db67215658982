-- +goose Up

-- Web console sign-ins (package console). The browser holds a random
-- session id in a cookie; only its SHA-256 is stored, so a copy of this
-- table signs nobody in. A session names its token, not its role or scope:
-- every request looks the token up again in the running configuration, so
-- a token removed from it ends its sessions at once. The rows live here,
-- not in one process, so that every dlq instance behind a load balancer
-- knows every session.
CREATE TABLE console_sessions (
    id_hash    bytea       PRIMARY KEY,
    token_name text        NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now(),
    expires_at timestamptz NOT NULL
);

-- The cleanup of expired sessions reads them oldest first.
CREATE INDEX console_sessions_expires ON console_sessions (expires_at);

-- +goose Down
DROP TABLE console_sessions;
