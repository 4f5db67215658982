-- +goose Up

-- The queues the actor was restricted to when it acted (its token's
-- scope), NULL for an actor that sees every queue. The selection alone
-- does not say it: a scoped token's "every pending message" means only
-- its queues', and an audit reader must be able to tell the two apart.
-- Adding a nullable column without a default rewrites no row.
ALTER TABLE audit_log ADD COLUMN scope text[];

-- +goose Down
ALTER TABLE audit_log DROP COLUMN scope;
