package cli

import (
	"flag"
	"io"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/replay"
)

// parseReplay runs dlq replay's flags and ids through what Replay does
// before it sends the command.
func parseReplay(t *testing.T, args ...string) (replay.Request, error) {
	t.Helper()
	var f replayFlags
	fs := flag.NewFlagSet("dlq replay", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f.register(fs)
	if err := fs.Parse(args); err != nil {
		return replay.Request{}, err
	}
	pos, err := positionals(fs, args)
	if err != nil {
		return replay.Request{}, err
	}
	ids, err := replayIDs(pos)
	if err != nil {
		return replay.Request{}, err
	}
	return f.request(ids, time.Date(2026, 5, 2, 12, 0, 0, 0, time.UTC))
}

func TestReplayFlagsRequest(t *testing.T) {
	t.Parallel()

	t.Run("ids before, between and after flags, comma lists too", func(t *testing.T) {
		req, err := parseReplay(t, "7", "--rate", "50", "8,9", "--limit", "2", "10")
		require.NoError(t, err)
		require.Equal(t, []int64{7, 8, 9, 10}, req.IDs)
		require.Equal(t, 50.0, req.RatePerSecond)
		require.Equal(t, 2, req.Limit)
		require.Nil(t, req.Filter)
	})

	t.Run("a filter with times ago and RFC 3339", func(t *testing.T) {
		req, err := parseReplay(t, "--source-queue", "orders", "--since", "1h", "--until", "2026-05-02T11:30:00Z",
			"--field", "customer.tier=gold", "--field", "total>10")
		require.NoError(t, err)
		require.NotNil(t, req.Filter)
		require.Equal(t, "orders", req.Filter.SourceQueue)
		require.Equal(t, []string{"customer.tier=gold", "total>10"}, req.Filter.Fields)
		require.Equal(t, time.Date(2026, 5, 2, 11, 0, 0, 0, time.UTC), req.Filter.FailedAfter.UTC())
		require.Equal(t, time.Date(2026, 5, 2, 11, 30, 0, 0, time.UTC), req.Filter.FailedBefore.UTC())
	})

	t.Run("the filter flags of dlq ls are the same filter", func(t *testing.T) {
		req, err := parseReplay(t, "--queue", "orders", "--after", "1h", "--before", "2026-05-02T11:30:00Z", "--category", "transient")
		require.NoError(t, err)
		require.NotNil(t, req.Filter)
		require.Equal(t, "orders", req.Filter.SourceQueue)
		require.Equal(t, "transient", req.Filter.Category)
		require.Equal(t, time.Date(2026, 5, 2, 11, 0, 0, 0, time.UTC), req.Filter.FailedAfter.UTC())
		require.Equal(t, time.Date(2026, 5, 2, 11, 30, 0, 0, time.UTC), req.Filter.FailedBefore.UTC())
	})

	t.Run("target, canary, delay and on-unknown", func(t *testing.T) {
		req, err := parseReplay(t, "--to-exchange", "", "--to-routing-key", "orders.retry", "--canary", "5",
			"--canary-wait", "1500ms", "--delay", "10m", "--on-unknown", "hold", "42")
		require.NoError(t, err)
		require.Equal(t, &replay.Target{Exchange: "", RoutingKey: "orders.retry"}, req.Target)
		require.Equal(t, &replay.Canary{Count: 5, WaitSeconds: 2}, req.Canary)
		require.Equal(t, 600, req.DelaySeconds)
		require.Equal(t, replay.OnUnknownHold, req.OnUnknown)
	})

	t.Run("no target unless asked", func(t *testing.T) {
		req, err := parseReplay(t, "42")
		require.NoError(t, err)
		require.Nil(t, req.Target)
		require.Nil(t, req.Canary)
		require.Empty(t, req.OnUnknown, "the server's default (replay.on_unknown) applies")
	})

	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "say what to replay"},
		{[]string{"42", "--source-queue", "orders"}, "give ids or filter flags, not both"},
		{[]string{"42", "--category", "permanent"}, "give ids or filter flags, not both"},
		{[]string{"42,x"}, `"x" is not a message id`},
		{[]string{"-3"}, "flag provided but not defined"},
		{[]string{"0"}, `"0" is not a message id`},
		{[]string{"--on-unknown", "maybe", "42"}, `--on-unknown "maybe" must be retry`},
		{[]string{"--source-queue", "orders", "--since", "yesterday"}, `--since "yesterday": use an RFC 3339 time`},
		{[]string{"--source-queue", "orders", "--since", "1h", "--until", "2h"}, "--since (2026-05-02T11:00:00Z) must be before --until (2026-05-02T10:00:00Z)"},
		{[]string{"--delay", "1500ms", "42"}, "--delay must be a whole number of seconds"},
		{[]string{"--delay", "-1s", "42"}, "--delay must be a whole number of seconds"},
		{[]string{"--start-at", "tomorrow", "42"}, `--start-at "tomorrow": use an RFC 3339 time`},
		{[]string{"--start-at", "2026-05-02T02:00:00Z", "--delay", "1m", "42"}, "give --delay or --start-at, not both"},
	} {
		_, err := parseReplay(t, tc.args...)
		require.ErrorContains(t, err, tc.want, "dlq replay %q", tc.args)
	}
}

// TestReplayTargetHelp: the target is a pair (exchange, routing key), as
// the API takes it; the help of --to-exchange and --to-routing-key and
// docs/REPLAY.md say what each one alone means.
func TestReplayTargetHelp(t *testing.T) {
	t.Parallel()
	var f replayFlags
	fs := flag.NewFlagSet("dlq replay", flag.ContinueOnError)
	var help strings.Builder
	fs.SetOutput(&help)
	f.register(fs)
	fs.PrintDefaults()
	alone := []string{`routing key "" unless --to-routing-key`, `the default exchange "", i.e. straight to the queue of that name`}
	for _, s := range alone {
		require.Contains(t, help.String(), s)
	}
	doc, err := os.ReadFile("../../docs/REPLAY.md")
	require.NoError(t, err)
	_, after, ok := strings.Cut(string(doc), "--to-exchange billing --to-routing-key invoices.retry")
	require.True(t, ok, "docs/REPLAY.md lost its --to-exchange example")
	near := strings.Join(strings.Fields(after[:min(len(after), 3000)]), " ")
	for _, s := range alone {
		require.Contains(t, near, s, "docs/REPLAY.md, near its --to-exchange example")
	}

	req, err := parseReplay(t, "--to-exchange", "billing", "42")
	require.NoError(t, err)
	require.Equal(t, &replay.Target{Exchange: "billing", RoutingKey: ""}, req.Target)
	req, err = parseReplay(t, "--to-routing-key", "orders", "42")
	require.NoError(t, err)
	require.Equal(t, &replay.Target{Exchange: "", RoutingKey: "orders"}, req.Target)
}

// dlq replay, replays and cancel take --token like the HTTP commands: it
// wins over the environment, whose token is never the flag's default
// (-h would print it), and the help names DLQ_TOKEN.
func TestReplayCommandsToken(t *testing.T) {
	t.Parallel()
	var f replayFlags
	fs := flag.NewFlagSet("dlq replay", flag.ContinueOnError)
	var help strings.Builder
	fs.SetOutput(&help)
	f.register(fs)
	require.NoError(t, fs.Parse([]string{"--token", "flag-token", "--source-queue", "orders"}))
	require.Equal(t, "flag-token", f.rf.token)
	fs.Usage()
	require.Contains(t, help.String(), "DLQ_TOKEN")
	require.NotContains(t, help.String(), "flag-token", "the value never prints")

	env := func(vars map[string]string) func(string) string { return func(k string) string { return vars[k] } }
	for _, tc := range []struct {
		flag       string
		vars       map[string]string
		configured string
		want       string
	}{
		{"flag-token", map[string]string{"DLQ_TOKEN": "env-token"}, "cfg-token", "flag-token"},
		{"flag-token", map[string]string{"DLQ_TOKEN_FILE": "/nonexistent/token"}, "", "flag-token"},
		{"", map[string]string{"DLQ_TOKEN": "env-token"}, "cfg-token", "env-token"},
		{"", map[string]string{"DLQ_ADMIN_TOKEN": "admin-token"}, "cfg-token", "admin-token"},
		{"", nil, "cfg-token", "cfg-token"},
	} {
		got, err := rpcToken(tc.flag, env(tc.vars), tc.configured)
		require.NoError(t, err, "%+v", tc)
		require.Equal(t, tc.want, got, "%+v", tc)
	}
	_, err := rpcToken("", env(map[string]string{"DLQ_TOKEN_FILE": "/nonexistent/token"}), "")
	require.ErrorContains(t, err, "DLQ_TOKEN_FILE")
}
