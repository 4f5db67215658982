package cli

import (
	"flag"
	"io"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// parseFilter runs args through the filter flags of ls, ack, rm, export and
// replay.
func parseFilter(t *testing.T, args ...string) *filterFlags {
	t.Helper()
	var f filterFlags
	fs := flag.NewFlagSet("dlq ls", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	require.NoError(t, fs.Parse(args))
	return &f
}

// Both spellings of the queue and the time range select the same messages,
// in every command: scripts written for dlq replay's names work with dlq ls,
// and the other way round.
func TestFilterFlagsBothSpellings(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
	want := url.Values{
		"source_queue":  {"orders"},
		"failed_after":  {"2026-05-02T11:00:00Z"},
		"failed_before": {"2026-05-02T11:30:00Z"},
		"category":      {"transient"},
		"field":         {"customer.tier=gold"},
	}
	for _, args := range [][]string{
		{"--queue", "orders", "--after", "1h", "--before", "30m"},
		{"--source-queue", "orders", "--since", "1h", "--until", "30m"},
		{"--source-queue", "orders", "--after", "1h", "--until", "2026-05-02T11:30:00Z"},
	} {
		args = append(args, "--category", "transient", "--field", "customer.tier=gold")
		f := parseFilter(t, args...)
		q, err := f.query(now)
		require.NoError(t, err, "%q", args)
		require.Equal(t, want, q, "%q", args)
		sf, err := f.storeFilter(now)
		require.NoError(t, err, "%q", args)
		require.Equal(t, "orders", sf.SourceQueue)
		require.Equal(t, "transient", sf.Category)
		require.Equal(t, time.Date(2026, 5, 2, 11, 0, 0, 0, time.UTC), sf.FailedAfter.UTC())
		require.Equal(t, time.Date(2026, 5, 2, 11, 30, 0, 0, time.UTC), sf.FailedBefore.UTC())
		require.False(t, f.empty())
	}
}

// Each filter flag alone is a filter: dlq ack --category permanent acts on
// a selection, it is not refused as "no filter" (it was, before category
// counted), and with ids it is refused as ids and a filter at once.
func TestFilterFlagsEachAloneIsAFilter(t *testing.T) {
	t.Parallel()
	require.True(t, parseFilter(t).empty())
	for _, args := range [][]string{
		{"--status", "all"}, {"--queue", "q"}, {"--source-queue", "q"}, {"--reason", "expired"},
		{"--category", "permanent"}, {"--group", "1f"}, {"--q", "word"}, {"--after", "1h"}, {"--since", "1h"},
		{"--before", "1h"}, {"--until", "1h"}, {"--field", "a=1"},
	} {
		require.False(t, parseFilter(t, args...).empty(), "%q", args)
	}
}

// A wrong time names the flag as the user typed it, and says what to give.
func TestFilterFlagsTimeErrors(t *testing.T) {
	t.Parallel()
	now := time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC)
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--since", "yesterday"}, `--since "yesterday": use an RFC 3339 time`},
		{[]string{"--after", "yesterday"}, `--after "yesterday": use an RFC 3339 time`},
		{[]string{"--until", "noon"}, `--until "noon": use an RFC 3339 time`},
		{[]string{"--before", "noon"}, `--before "noon": use an RFC 3339 time`},
		{[]string{"--after", "1h", "--before", "2h"}, "--after (2026-05-02T11:00:00Z) must be before --before (2026-05-02T10:00:00Z)"},
		{[]string{"--since", "1h", "--before", "1h"}, "--since (2026-05-02T11:00:00Z) must be before --before (2026-05-02T11:00:00Z)"},
	} {
		f := parseFilter(t, tc.args...)
		_, err := f.query(now)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
		_, err = f.storeFilter(now)
		require.ErrorContains(t, err, tc.want, "%q", tc.args)
	}
}
