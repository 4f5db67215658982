package cli

import (
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/timefmt"
	"github.com/dlq/dlq/store"
)

// anyTime is a time as a person reads it in a table: a date and a clock.
// Every one the commands print must be followed by its zone, UTC, as the
// console shows it (timefmt): a local time without a zone cannot be told
// from UTC by whoever reads it, nor compared with the console's.
var anyTime = regexp.MustCompile(`\d{4}-\d\d-\d\d[ T]\d\d:\d\d(:\d\d)?(Z|[+-]\d\d:\d\d| UTC)?`)

// requireUTCTimes checks that every time in out is in the console's
// format, and that out holds at least one.
func requireUTCTimes(t *testing.T, what, out string) {
	t.Helper()
	found := anyTime.FindAllString(out, -1)
	require.NotEmpty(t, found, "%s prints no time:\n%s", what, out)
	for _, s := range found {
		require.Regexp(t, `^\d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC$`, s, "%s prints a time not as the console does:\n%s", what, out)
	}
}

// TestTimesAreUTCWithTheirZone: ls, show, groups, stats and audit print
// each time in UTC with its zone, the same text the console shows for it;
// --json keeps the API's RFC 3339.
func TestTimesAreUTCWithTheirZone(t *testing.T) {
	t.Parallel()
	url, _, _, ids := clitest.Server(t)
	const admin = clitest.AdminToken
	id := fmt.Sprint(ids[0])

	code, out, errOut := cli(t, url, admin, runShow, "--json", id)
	require.Equal(t, ExitOK, code, errOut)
	var m store.Message
	require.NoError(t, json.Unmarshal([]byte(out), &m))
	require.Contains(t, out, `"failed_at": "`+m.FailedAt.Format("2006-01-02T15:04:05"), "--json is the API's answer")
	failed := timefmt.Human(m.FailedAt)

	code, out, errOut = cli(t, url, admin, runShow, id)
	require.Equal(t, ExitOK, code, errOut)
	rows, _, _ := strings.Cut(out, "\nproperties:")
	require.Regexp(t, `(?m)^failed at +`+regexp.QuoteMeta(failed+" (first "+timefmt.Human(m.FirstFailedAt)+")")+`$`, rows)
	requireUTCTimes(t, "dlq show", rows)

	code, out, errOut = cli(t, url, admin, runLs)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, failed)
	requireUTCTimes(t, "dlq ls", out)

	code, out, errOut = cli(t, url, admin, runGroups)
	require.Equal(t, ExitOK, code, errOut)
	requireUTCTimes(t, "dlq groups", out)

	code, out, errOut = cli(t, url, admin, runStats)
	require.Equal(t, ExitOK, code, errOut)
	requireUTCTimes(t, "dlq stats", out)

	code, _, errOut = cli(t, url, admin, runActionCmd("ack"), id)
	require.Equal(t, ExitOK, code, errOut)
	code, out, errOut = cli(t, url, admin, runAudit)
	require.Equal(t, ExitOK, code, errOut)
	requireUTCTimes(t, "dlq audit", out)
}
