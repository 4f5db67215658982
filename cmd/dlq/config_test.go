package main

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/store"
)

// emptySchema is a fresh schema no dlq migrated, and a function counting
// its tables.
func emptySchema(t *testing.T) (dsn string, tables func() int) {
	t.Helper()
	dsn = dlqtest.Schema(t)
	db := dlqtest.DB(t, dsn)
	return dsn, func() int {
		var n int
		require.NoError(t, db.QueryRow(context.Background(),
			`SELECT count(*) FROM information_schema.tables WHERE table_schema = current_schema()`).Scan(&n))
		return n
	}
}

// TestConfigCommandsReadOnlyWhatTheySay: dlq rekey --status changes
// nothing, the schema included; dlq migrate refuses --no-migrate (its job
// is migrating) and every command refuses a configuration flag it does
// not use, naming the commands that take it; serve, migrate, rekey and
// topology refuse an argument rather than ignore the flags after it.
func TestConfigCommandsReadOnlyWhatTheySay(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	dsn, tables := emptySchema(t)
	key := "k1:" + base64.StdEncoding.EncodeToString(make([]byte, 32))
	env := []string{"DLQ_DATABASE_URL=" + dsn, "DLQ_ENCRYPTION_KEYS=" + key, "DLQ_ENCRYPTION_KEYS_FILE=",
		"DLQ_AMQP_URL=amqp://guest:guest@127.0.0.1:1/", "DLQ_TOKEN=", "DLQ_ADMIN_TOKEN="}

	code, out, errOut := execDLQEnv(t, bin, env, "rekey", "--status")
	require.NotEqual(t, cli.ExitOK, code, "nothing to read in a schema dlq never migrated: %s", out)
	require.Contains(t, errOut, "--status changes nothing, the schema included")
	require.Zero(t, tables(), "dlq rekey --status migrated the schema: %s", errOut)

	for _, c := range []struct {
		args []string
		say  string
	}{
		{[]string{"migrate", "--no-migrate"}, "--no-migrate is no flag of dlq migrate, whose job is to apply the migrations"},
		{[]string{"migrate", "--http-addr", "127.0.0.1:0"}, "--http-addr is no flag of dlq migrate, which does not use it (it is one of dlq serve)"},
		{[]string{"topology", "--database-url", dsn}, "(it is one of dlq migrate, dlq rekey, dlq serve)"},
		{[]string{"replays", "--no-migrate"}, "--no-migrate is no flag of dlq replays"},
		{[]string{"migrate", "status"}, `dlq migrate: unexpected argument "status": dlq migrate takes flags only`},
		{[]string{"rekey", "status"}, `dlq rekey: unexpected argument "status"`},
		{[]string{"serve", "now", "--no-migrate"}, `dlq serve: unexpected argument "now"`},
		{[]string{"topology", "orders"}, `dlq topology: unexpected argument "orders"`},
	} {
		code, out, errOut := execDLQEnv(t, bin, env, c.args...)
		require.Equal(t, cli.ExitUsage, code, "dlq %q: %s%s", c.args, out, errOut)
		require.Contains(t, errOut, c.say, "dlq %q", c.args)
		require.Zero(t, tables(), "dlq %q changed the schema", c.args)
	}

	// Help lists what the command takes, and exits 0.
	code, _, errOut = execDLQEnv(t, bin, env, "migrate", "-h")
	require.Equal(t, cli.ExitOK, code)
	require.Contains(t, errOut, "-database-url")
	require.Contains(t, errOut, "-status")
	require.NotContains(t, errOut, "-http-addr")
	require.NotContains(t, errOut, "-no-migrate")
	code, _, errOut = execDLQEnv(t, bin, env, "serve", "-h")
	require.Equal(t, cli.ExitOK, code)
	for _, f := range []string{"-config", "-amqp-url", "-database-url", "-http-addr", "-no-migrate"} {
		require.Contains(t, errOut, f, "dlq serve -h")
	}

	// What they are for still works.
	code, _, errOut = execDLQEnv(t, bin, env, "migrate", "--database-url", dsn)
	require.Equal(t, cli.ExitOK, code, errOut)
	require.NotZero(t, tables())
	code, out, errOut = execDLQEnv(t, bin, env, "rekey", "--status", "--no-migrate")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "KEY")
}

// TestServeConfigurationErrorExits2: a configuration serve cannot use (a
// TLS certificate that is not there) stops it with exit code 2, before it
// touches PostgreSQL or RabbitMQ; 1 is for failures at run time.
func TestServeConfigurationErrorExits2(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	dsn, tables := emptySchema(t)
	app := dlqtest.Dial(t)
	exchange, queue, ctl := dlqtest.Name(t, "x"), dlqtest.Name(t, "q"), dlqtest.Name(t, "ctl")
	t.Cleanup(func() {
		dlqtest.DeleteQueues(t, app, queue, ctl)
		dlqtest.DeleteExchanges(t, app, exchange)
	})
	missing := filepath.Join(t.TempDir(), "missing")
	env := []string{"DLQ_DATABASE_URL=" + dsn, "DLQ_AMQP_URL=" + dlqtest.AMQPURL(), "DLQ_EXCHANGE=" + exchange,
		"DLQ_QUEUES=" + queue, "DLQ_CONTROL_QUEUE=" + ctl, "DLQ_HTTP_ADDR=127.0.0.1:0", "DLQ_ADMIN_TOKEN=serve-config-token",
		"DLQ_ENCRYPTION_KEYS=", "DLQ_ENCRYPTION_KEYS_FILE="}
	for _, tc := range []struct {
		env  []string
		want []string
	}{
		{[]string{"DLQ_TLS_CERT=" + missing + ".crt", "DLQ_TLS_KEY=" + missing + ".key"}, []string{missing + ".crt"}},
		// Checked by the operations layer, which is built once ingest runs:
		// serve checks it first.
		{[]string{"DLQ_REDACT_BODY_PATHS=card..number"}, []string{"redaction.body_paths / DLQ_REDACT_BODY_PATHS", "card..number"}},
	} {
		code, out, errOut := execDLQEnv(t, bin, append(slices.Clone(env), tc.env...), "serve")
		require.Equal(t, cli.ExitUsage, code, "%v: %s%s", tc.env, out, errOut)
		require.Contains(t, errOut, "wrong configuration")
		for _, w := range tc.want {
			require.Contains(t, errOut, w)
		}
		require.Zero(t, tables(), "serve migrated before it read its configuration: %v", tc.env)
	}
}

// TestReplayJSONWaitsForApproval: `dlq replay --wait --json` above the
// approval threshold prints the request for approval as JSON and exits 0,
// as without --json, instead of waiting for a task that does not exist.
func TestReplayJSONWaitsForApproval(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	st, _, _ := clitest.Seeded(t)
	queue, _ := replayControl(t, st, func(c *ops.Config) { c.ApprovalAbove = 3 })
	env := controlEnv(queue, clitest.OperatorToken)
	for _, args := range [][]string{
		{"replay", "--queue", "orders", "--confirm", "--wait", "--json"},
		{"replay", "--queue", "orders", "--confirm", "--json"},
	} {
		code, out, errOut := execDLQEnv(t, bin, env, args...)
		require.Equal(t, cli.ExitOK, code, "dlq %q: %s%s", args, out, errOut)
		var answer struct{ Approval *store.Approval }
		require.NoError(t, json.Unmarshal([]byte(out), &answer), "dlq %q: %s", args, out)
		require.NotNil(t, answer.Approval, out)
		require.Equal(t, "pending", answer.Approval.Status)
		require.EqualValues(t, 4, answer.Approval.Count)
		require.Equal(t, "replay", answer.Approval.Action)
	}
	code, out, errOut := execDLQEnv(t, bin, env, "replay", "--queue", "orders", "--confirm", "--wait")
	require.Equal(t, cli.ExitOK, code, errOut)
	require.Contains(t, out, "waits for approval")
	require.False(t, strings.Contains(errOut, "replay_status"), errOut)

	// An unreadable token file is a usage error here as in dlq ls.
	code, _, errOut = execDLQEnv(t, bin, append(env, "DLQ_TOKEN=", "DLQ_TOKEN_FILE="+filepath.Join(t.TempDir(), "missing")),
		"replays")
	require.Equal(t, cli.ExitUsage, code, errOut)
	require.Contains(t, errOut, "DLQ_TOKEN_FILE")
}
