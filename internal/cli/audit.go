package cli

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"net/url"
	"strconv"
	"time"

	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// Audit runs `dlq audit`: who did what, newest first.
func Audit(args []string) int { return runAudit(args, osEnv()) }

// runAudit lists the audit log, newest first, a page at a time like ls.
func runAudit(args []string, env cliEnv) int {
	fs := flag.NewFlagSet("dlq audit", flag.ContinueOnError)
	var (
		af                   apiFlags
		actor, action, since string
		limit                int
		curs                 string
		all                  bool
	)
	af.register(fs, env)
	fs.StringVar(&actor, "actor", "", "only what this actor (a token's name) did")
	fs.StringVar(&action, "action", "", "only this action: acknowledge, delete, replay, replay_cancel, edit_replay, approve, reject, retention, evict, ...")
	fs.StringVar(&since, "since", "", "only since: RFC 3339 time, or a duration ago (24h)")
	fs.IntVar(&limit, "limit", 50, "entries per page (at most 1000)")
	fs.StringVar(&curs, "cursor", "", "continue after a previous page (its next cursor)")
	fs.BoolVar(&all, "all", false, "follow cursors to the last page")
	fs.Usage = func() {
		// The role from the API's own rule, so that the help cannot drift.
		// The CLI is a client of the API and may not import ops (docs/ARCHITECTURE.md);
		// TestAuditHelpNamesTheRoleItNeeds holds this to ops.RoleFor(ops.ActAudit).
		fmt.Fprintln(env.stderr, "usage: dlq audit [flags]   who did what, newest first (operator token or higher)")
		fs.PrintDefaults()
	}
	if code := parseNoArgs(fs, args, env); code >= 0 {
		return code
	}
	c := newAPIClient("audit", af, env)
	after, err := timeArg("since", since, time.Now())
	if err != nil {
		fmt.Fprintf(env.stderr, "dlq audit: %v\n", err)
		return ExitUsage
	}
	q := url.Values{"limit": {strconv.Itoa(limit)}}
	for k, v := range map[string]string{"actor": actor, "action": action, "since": after, "cursor": curs} {
		if v != "" {
			q.Set(k, v)
		}
	}
	tw := c.listing()
	fmt.Fprintln(tw, "ID\tAT\tACTOR\tROLE\tVIA\tACTION\tCOUNT\tSELECTION")
	return c.pages(context.Background(), "/api/v1/audit", q, all, tw, func(b []byte) (*string, error) {
		var page struct {
			Entries    []store.AuditEntry `json:"entries"`
			NextCursor *string            `json:"next_cursor"`
		}
		if err := json.Unmarshal(b, &page); err != nil {
			return nil, err
		}
		for _, e := range page.Entries {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", e.ID, timefmt.Human(e.At),
				e.Actor, e.Role, e.Via, e.Action, thousands(e.Count), auditSelection(e))
		}
		return page.NextCursor, nil
	})
}

// auditSelection is what an entry acted on, for the SELECTION column: its
// selection and, for an acknowledge or delete by filter with --limit, the
// limit, which the entry keeps in its detail; without it a delete of 3
// of a queue reads as a delete of the queue.
func auditSelection(e store.AuditEntry) string {
	s := shorten(string(e.Selection), 70)
	var d struct {
		Limit int64 `json:"limit"`
	}
	if len(e.Detail) > 0 && json.Unmarshal(e.Detail, &d) == nil && d.Limit > 0 {
		s += " limit " + thousands(d.Limit)
	}
	return s
}
