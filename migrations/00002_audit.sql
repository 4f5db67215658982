-- +goose Up

-- Who did what, when, to how many messages. Append-only: the API offers no
-- way to change or delete it; retention cleanup is the only deleter.
CREATE TABLE audit_log (
    id          bigserial PRIMARY KEY,
    at          timestamptz NOT NULL DEFAULT now(),
    actor       text        NOT NULL,
    role        text        NOT NULL DEFAULT '',
    via         text        NOT NULL,            -- api | control | cli | cron
    action      text        NOT NULL,            -- replay | acknowledge | delete | evict | ...
    selection   jsonb       NOT NULL DEFAULT '{}',
    count       bigint      NOT NULL DEFAULT 0,
    request_id  text        NOT NULL DEFAULT '',
    detail      jsonb
);
CREATE INDEX audit_log_at ON audit_log (at, id);

-- +goose Down
DROP TABLE audit_log;
