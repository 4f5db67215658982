// Package redact turns connection strings and receiver URLs into text that
// can go into a log line or an error message.
//
// There are two kinds of secret-bearing strings in dlq, and each has one
// function:
//
//   - URL takes a connection string: an AMQP URL, a PostgreSQL URL or a
//     PostgreSQL keyword=value string (also the management API's URL). What
//     helps a reader find the server stays visible: the scheme, the user, the
//     host and port, the vhost or database. The password is replaced by
//     "xxxxx", and so is the value of every parameter (URL query or
//     keyword=value) whose name is not on a short list of settings known to
//     hold no secret (sslmode, heartbeat, connect_timeout, ...). An unknown
//     parameter may be a token (?token=..., sslpassword=...), so unknown
//     means hidden.
//
//   - Webhook takes the URL of an alert receiver and keeps only its scheme
//     and host. A receiver's credential is often its path or query, not its
//     user info: a Slack incoming webhook is
//     https://hooks.slack.com/services/T…/B…/<secret>, Discord and Teams do
//     the same, and signed URLs carry their signature in the query. Which
//     part of a receiver URL is the secret cannot be told from the URL, so
//     none of it after the host is shown.
//
// URL works on the raw text and never needs the string to parse. The parsers
// that read these strings disagree (Go's net/url takes the last '@' before
// the path as the end of the user info, pgx the first; pgx reads a '#' as part
// of the query, net/url as the start of a fragment; pgx reads any string
// without a postgres:// prefix as keyword=value), so URL hides the union of
// what each of them would take as a password: everything from the first ':'
// after the user name up to the last '@' before the path, every query value
// not known to be harmless, and, for strings pgx would read as
// keyword=value, every such value too. FuzzURL checks this against
// pgconn.ParseConfig and net/url (which amqp091.ParseURI reads with).
package redact
