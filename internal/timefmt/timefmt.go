// Package timefmt is the one format of every time dlq shows a person: the
// web console's pages and the command line's tables and summaries. An
// on-call engineer compares a time in one with a time in the other, and
// with the alerts' and the logs', so each says its zone, and the zone is
// always UTC: a server's or a laptop's local zone differs from the
// colleague's reading the same incident. Machine output (the API's JSON,
// --json) keeps RFC 3339.
//
// It imports nothing of dlq's, so that every package may use it
// (docs/ARCHITECTURE.md, "Dependencies").
package timefmt

import "time"

// Layout is the format: "2024-05-01 12:00:00 UTC".
const Layout = "2006-01-02 15:04:05 UTC"

// Human is t in Layout, converted to UTC.
func Human(t time.Time) string { return t.UTC().Format(Layout) }
