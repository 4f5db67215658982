package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/api"
	"github.com/dlq/dlq/auth"
	"github.com/dlq/dlq/internal/cli"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
)

// dlqBinary is the dlq binary under test: DLQ_TEST_DLQ_BIN when set (make
// test builds it once for every package), otherwise built for the test,
// with the race detector when this test binary has it (so the build reuses
// the packages the test build compiled).
func dlqBinary(t *testing.T) string {
	t.Helper()
	if bin := os.Getenv("DLQ_TEST_DLQ_BIN"); bin != "" {
		return bin
	}
	bin := filepath.Join(t.TempDir(), "dlq")
	args := []string{"build", "-o", bin}
	if raceEnabled {
		args = append(args, "-race")
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	require.NoError(t, err, "go build: %s", out)
	return bin
}

// execDLQ runs the dlq binary with the API's address and a token, and
// returns its exit code, stdout and stderr.
func execDLQ(t *testing.T, bin, url, token string, args ...string) (int, string, string) {
	t.Helper()
	return execDLQEnv(t, bin, []string{"DLQ_URL=" + url, "DLQ_TOKEN=" + token, "DLQ_ADMIN_TOKEN="}, args...)
}

// execDLQEnv runs the dlq binary with these environment variables added to
// the test's, and returns its exit code, stdout and stderr.
func execDLQEnv(t *testing.T, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(os.Environ(), env...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		require.NoError(t, err, "run dlq %v", args)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errOut.String()
}

// TestCLIBinary runs the dlq binary itself against a live server: every
// API command answers a table by default and JSON with --json, and the
// exit code says what happened — 0 done, 2 usage, 3 unreachable or server
// error, 4 not found, 5 token refused.
func TestCLIBinary(t *testing.T) {
	t.Parallel()
	bin := dlqBinary(t)
	url, _, _, ids := clitest.Server(t)
	const admin = "cli-admin-token"
	id := fmt.Sprint(ids[0])

	tables := map[string][]string{
		"ID  ":           {"ls"},
		"message id":     {"show", id},
		"GROUP":          {"groups"},
		"oldest pending": {"stats"},
		"QUEUE":          {"status"},
		"dry run: 1 messages would be acknowledged": {"ack", "--dry-run", id},
		"dry run: 6 messages would be deleted":      {"rm", "--dry-run", "--status", "all"},
		"ACTION":                                    {"audit", "--since", "1h"},
	}
	for want, args := range tables {
		code, out, errOut := execDLQ(t, bin, url, admin, args...)
		require.Equal(t, cli.ExitOK, code, "dlq %v: %s", args, errOut)
		require.Contains(t, out, want, "dlq %v", args)
		require.False(t, json.Valid([]byte(out)), "dlq %v prints a table, not JSON", args)

		code, out, errOut = execDLQ(t, bin, url, admin, append([]string{args[0], "--json"}, args[1:]...)...)
		require.Equal(t, cli.ExitOK, code, "dlq %v --json: %s", args, errOut)
		require.True(t, json.Valid([]byte(out)), "dlq %v --json: %s", args, out)
	}

	for _, c := range []struct {
		code  int
		token string
		args  []string
		say   string
	}{
		{cli.ExitUsage, admin, []string{"ls", "--staus", "pending"}, "flag provided but not defined"},
		{cli.ExitUsage, admin, []string{"ls", "--status", "bogus"}, "status"},
		{cli.ExitUsage, admin, []string{"rm", "--status", "all"}, "--yes"},
		{cli.ExitUsage, admin, []string{"show", "x"}, "not a message id"},
		{cli.ExitUsage, admin, []string{"no-such-command"}, "unknown command"},
		{cli.ExitNotFound, admin, []string{"show", "999999"}, "not_found"},
		{cli.ExitDenied, "", []string{"status"}, "DLQ_TOKEN"},
		{cli.ExitDenied, "wrong-token", []string{"stats", "--json"}, "invalid_token"},
		{cli.ExitDenied, "cli-viewer-token", []string{"ack", id}, "forbidden"},
		{cli.ExitDenied, "cli-viewer-token", []string{"audit"}, "forbidden"},
		{cli.ExitUsage, admin, []string{"audit", "--since", "yesterday"}, "--since"},
		// This server runs no cron service.
		{cli.ExitUnavailable, admin, []string{"jobs"}, "unavailable (HTTP 503)"},
		{cli.ExitUnavailable, admin, []string{"alerts", "--json"}, "unavailable (HTTP 503)"},
	} {
		code, out, errOut := execDLQ(t, bin, url, c.token, c.args...)
		require.Equal(t, c.code, code, "dlq %v: %s%s", c.args, out, errOut)
		require.Contains(t, errOut, c.say, "dlq %v", c.args)
	}

	// Nothing listening, and a server that fails (its database is gone).
	code, _, errOut := execDLQ(t, bin, "http://127.0.0.1:1", admin, "status")
	require.Equal(t, cli.ExitUnavailable, code)
	require.Contains(t, errOut, "cannot reach dlq")
	broken := brokenServer(t)
	code, _, errOut = execDLQ(t, bin, broken, admin, "status")
	require.Equal(t, cli.ExitUnavailable, code, errOut)
	require.Contains(t, errOut, "internal (HTTP 500)")
}

// brokenServer is a live API whose database connection is closed, so its
// store routes answer 500.
func brokenServer(t *testing.T) string {
	t.Helper()
	st, _ := dlqtest.Store(t)
	authn, err := auth.New(auth.Config{AdminToken: "cli-admin-token"})
	require.NoError(t, err)
	operations, err := ops.New(ops.Config{Store: st})
	require.NoError(t, err)
	srv, err := api.New(api.Config{Addr: "127.0.0.1:0", Ops: operations, Auth: authn,
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Shutdown(context.Background()) })
	st.Close()
	return "http://" + strings.TrimSpace(ln.Addr().String())
}
