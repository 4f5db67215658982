package cli

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/dlq/dlq/cron"
	"github.com/dlq/dlq/internal/cli/clitest"
	"github.com/dlq/dlq/internal/dlqtest"
	"github.com/dlq/dlq/ops"
	"github.com/dlq/dlq/replay"
	"github.com/dlq/dlq/store"
)

// recoveryServer is a live API over the seeded store (four messages in
// orders, two in billing) that asks for approval above three messages,
// records replay tasks (it publishes nothing), and has the policies
// orders-retry (queue orders) and everywhere.
func recoveryServer(t *testing.T) (string, *store.Store, *pgxpool.Pool, []int64) {
	t.Helper()
	st, dsn, ids := clitest.Seeded(t)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	policy := func(name string, queues ...string) cron.Policy {
		return cron.Policy{Name: name, Queues: queues, Categories: []string{"transient"}, FirstDelay: time.Minute,
			BackoffFactor: 5, MaxDelay: time.Hour, MaxAttempts: 3, RatePerSecond: 200}
	}
	svc, err := cron.New(cron.Config{
		Store: st, Logger: quiet, Registerer: prometheus.NewRegistry(), Instance: "cli-test",
		Schedules: cron.Only(cron.Schedules{}),
		Policies:  cron.PoliciesConfig{Policies: []cron.Policy{policy("orders-retry", "orders"), policy("everywhere")}},
	})
	require.NoError(t, err)
	replays, err := replay.New(replay.Config{Store: st, Logger: quiet, Registerer: prometheus.NewRegistry()})
	require.NoError(t, err)
	url := clitest.ServeWith(t, st, svc, func(c *ops.Config) {
		c.ApprovalAbove = 3
		c.Replays = replays
	})
	return url, st, dlqtest.DB(t, dsn), ids
}

var approvalID = regexp.MustCompile(`waits for approval (\d+)`)

// TestApprovalCommands: a bulk action above the threshold waits for
// approval (ack says so), dlq approvals lists it, its requester cannot
// approve it, another principal approves it (it runs) or rejects one.
func TestApprovalCommands(t *testing.T) {
	t.Parallel()
	url, _, db, _ := recoveryServer(t)
	const (
		admin = clitest.AdminToken
		op    = clitest.OperatorToken
	)
	code, out, errOut := cli(t, url, op, runActionCmd("ack"), "--queue", "orders", "--yes")
	require.Equal(t, ExitOK, code, errOut)
	m := approvalID.FindStringSubmatch(out)
	require.NotNil(t, m, out)
	id := m[1]
	require.Contains(t, out, "acknowledge of 4 messages")
	require.Contains(t, out, "dlq approve "+id)

	code, out, _ = cli(t, url, clitest.ViewerToken, runApprovals)
	require.Equal(t, ExitOK, code)
	require.Regexp(t, `(?m)^`+id+`\s+pending\s+acknowledge\s+4\s+operator\s`, out)
	require.Contains(t, out, `"source_queue":"orders"`)

	code, _, errOut = cli(t, url, op, func(a []string, e cliEnv) int { return runDecide("approve", a, e) }, id)
	require.Equal(t, ExitDenied, code)
	require.Contains(t, errOut, "another principal must decide it")
	code, out, errOut = cli(t, url, admin, func(a []string, e cliEnv) int { return runDecide("approve", a, e) }, id)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "approval "+id+" approved: acknowledge of 4 messages requested by operator")
	var acked int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM dead_messages WHERE status = 'acknowledged'`).Scan(&acked))
	require.Equal(t, 4, acked)
	code, _, _ = cli(t, url, admin, func(a []string, e cliEnv) int { return runDecide("approve", a, e) }, id)
	require.Equal(t, ExitFailure, code, "decided already: 409")

	// A second request, rejected with a reason; one that does not exist.
	code, out, _ = cli(t, url, admin, runActionCmd("rm"), "--status", "all", "--yes")
	require.Equal(t, ExitOK, code)
	id2 := approvalID.FindStringSubmatch(out)[1]
	code, out, errOut = cli(t, url, op, func(a []string, e cliEnv) int { return runDecide("reject", a, e) }, id2, "--reason", "too broad")
	require.Equal(t, ExitDenied, code, "a delete needs an admin to decide it: %s %s", out, errOut)
	code, out, errOut = cli(t, url, clitest.AdminToken+"", func(a []string, e cliEnv) int { return runDecide("reject", a, e) }, id2)
	require.Equal(t, ExitDenied, code, "its own request: %s %s", out, errOut)
	code, _, _ = cli(t, url, admin, func(a []string, e cliEnv) int { return runDecide("approve", a, e) }, "999999")
	require.Equal(t, ExitNotFound, code)
	code, _, _ = cli(t, url, admin, func(a []string, e cliEnv) int { return runDecide("approve", a, e) })
	require.Equal(t, ExitUsage, code)

	// Its requester withdraws it; nobody else may.
	withdraw := func(a []string, e cliEnv) int { return runDecide("withdraw", a, e) }
	code, _, errOut = cli(t, url, op, withdraw, id2)
	require.Equal(t, ExitDenied, code, "not its requester: %s", errOut)
	require.Contains(t, errOut, "only its requester may withdraw it")
	code, out, errOut = cli(t, url, admin, withdraw, id2)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "approval "+id2+" withdrawn: delete of")
	code, _, _ = cli(t, url, admin, withdraw, id2)
	require.Equal(t, ExitFailure, code, "no longer pending: 409")

	code, out, _ = cli(t, url, admin, runApprovals, "--json")
	require.Equal(t, ExitOK, code)
	var list struct{ Approvals []store.Approval }
	require.NoError(t, json.Unmarshal([]byte(out), &list))
	require.Len(t, list.Approvals, 2)

	// A list as long as --limit says there may be more.
	code, _, errOut = cli(t, url, admin, runApprovals, "--limit", "2")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, "dlq approvals: showing the newest 2; --limit for more\n", errOut)
	code, _, errOut = cli(t, url, admin, runApprovals, "--limit", "3")
	require.Equal(t, ExitOK, code, errOut)
	require.Empty(t, errOut)
}

// TestEditReplayCommand: a dry run shows the copy and sends nothing; the
// edit sends it (a replay task) and the original is linked to it; a second
// edit is refused (409); locked headers and bad flags are refused.
func TestEditReplayCommand(t *testing.T) {
	t.Parallel()
	url, _, db, ids := recoveryServer(t)
	const op = clitest.OperatorToken
	run := func(args ...string) (int, string, string) {
		return cli(t, url, op, func(a []string, e cliEnv) int { return runEditReplay(a, e, strings.NewReader(`{"n":"stdin"}`)) }, args...)
	}
	id := strconv.FormatInt(ids[0], 10)
	code, out, errOut := run(id, "--body", `{"n":42}`, "--set-header", "x-fixed-by=jane", "--set-header",
		`x-attempt={"type":"int32","value":2}`, "--remove-header", "x-error-message", "--dry-run")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, "dry run: nothing was sent")
	require.Contains(t, out, `{"n":42}`)
	require.Contains(t, out, `"x-fixed-by": "jane"`)
	require.Contains(t, out, `"type": "int32"`)
	headers, _, _ := strings.Cut(out, "changes (as audited)")
	require.NotContains(t, headers, `"x-error-message"`, "removed from the copy")
	var tasks int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM replay_tasks`).Scan(&tasks))
	require.Zero(t, tasks)

	path := filepath.Join(t.TempDir(), "fixed.json")
	require.NoError(t, os.WriteFile(path, []byte(`{"n":"from a file"}`), 0o600))
	code, out, errOut = run(id, "--body-file", path)
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `copy of message `+id+` sent by replay task \d+ \(scheduled\)`, out)
	require.Contains(t, out, `{"n":"from a file"}`)
	var edited int
	require.NoError(t, db.QueryRow(context.Background(), `SELECT count(*) FROM message_edits WHERE message_id = $1`, ids[0]).Scan(&edited))
	require.Equal(t, 1, edited)
	// dlq show names the copy: its replay id, the task and the state.
	var copyID string
	var task int64
	require.NoError(t, db.QueryRow(context.Background(), `SELECT copy_replay_id, task_id FROM message_edits WHERE message_id = $1`, ids[0]).Scan(&copyID, &task))
	code, out, errOut = cli(t, url, op, runShow, id)
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `(?m)^edited\s+copy `+regexp.QuoteMeta(copyID)+`, replay task `+strconv.FormatInt(task, 10)+`, in_progress, by operator at `, out)

	code, _, errOut = run(id, "--body", `{"n":1}`)
	require.Equal(t, ExitFailure, code, "a second edit while the first is in progress: 409")
	require.Contains(t, errOut, "conflict")
	code, out, errOut = run(strconv.FormatInt(ids[1], 10), "--body-file", "-", "--dry-run")
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, `{"n":"stdin"}`)
	code, _, errOut = run(strconv.FormatInt(ids[1], 10), "--set-header", "x-dlq-id=7")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, "x-dlq-id")
	code, _, _ = run(strconv.FormatInt(ids[1], 10), "--body", "x", "--body-file", path)
	require.Equal(t, ExitUsage, code)
	code, _, _ = run(strconv.FormatInt(ids[1], 10))
	require.Equal(t, ExitUsage, code, "nothing to change")
	code, _, _ = run("abc", "--body", "x")
	require.Equal(t, ExitUsage, code)
	code, _, _ = cli(t, url, clitest.ViewerToken, func(a []string, e cliEnv) int { return runEditReplay(a, e, nil) }, id, "--body", "{}")
	require.Equal(t, ExitDenied, code)
}

// TestPolicyCommands: dlq policies shows each policy's selection,
// schedule and state; dlq policy pauses and resumes one.
func TestPolicyCommands(t *testing.T) {
	t.Parallel()
	url, _, db, _ := recoveryServer(t)
	code, out, errOut := cli(t, url, clitest.ViewerToken, runPolicies)
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `(?m)^orders-retry\s+active\s+orders\s+transient\s+1m0s, 5m0s, 25m0s\s+200/s\s+0\s+-$`, out)
	require.Regexp(t, `(?m)^everywhere\s+active\s+any\s+`, out)

	pause := func(token string, args ...string) (int, string, string) {
		return cli(t, url, token, runPolicy, append([]string{"pause"}, args...)...)
	}
	code, out, errOut = pause(clitest.OperatorToken, "--reason", "downstream maintenance", "orders-retry")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, "policy orders-retry is paused\n", out)
	code, out, _ = cli(t, url, clitest.ViewerToken, runPolicies)
	require.Equal(t, ExitOK, code)
	require.Regexp(t, `(?m)^orders-retry\s+paused\s`, out)
	require.Contains(t, out, "orders-retry paused")
	require.Contains(t, out, "by operator: downstream maintenance")
	var audited int
	require.NoError(t, db.QueryRow(context.Background(),
		`SELECT count(*) FROM audit_log WHERE action = 'policy_pause' AND actor = 'operator'`).Scan(&audited))
	require.Equal(t, 1, audited)

	code, out, _ = cli(t, url, clitest.OperatorToken, runPolicy, "resume", "orders-retry")
	require.Equal(t, ExitOK, code)
	require.Equal(t, "policy orders-retry is active\n", out)

	code, _, _ = pause(clitest.ViewerToken, "orders-retry")
	require.Equal(t, ExitDenied, code)
	code, _, _ = pause(clitest.OperatorToken, "no-such-policy")
	require.Equal(t, ExitNotFound, code)
	code, _, _ = cli(t, url, clitest.OperatorToken, runPolicy, "stop", "orders-retry")
	require.Equal(t, ExitUsage, code)
	code, _, _ = pause(clitest.OperatorToken)
	require.Equal(t, ExitUsage, code)
	code, out, _ = cli(t, url, clitest.ViewerToken, runPolicies, "--json")
	require.Equal(t, ExitOK, code)
	var v cron.PoliciesView
	require.NoError(t, json.Unmarshal([]byte(out), &v))
	require.Len(t, v.Policies, 2)
}

// TestCategoryFlags: ls and groups filter by category and show it.
func TestCategoryFlags(t *testing.T) {
	t.Parallel()
	url, _, db, ids := recoveryServer(t)
	// Two of the seeded messages (stored without rules: unknown) become
	// transient, as the categories job would make them.
	_, err := db.Exec(context.Background(), `UPDATE dead_messages SET category = 'transient' WHERE id = ANY($1)`, ids[:2])
	require.NoError(t, err)
	code, out, errOut := cli(t, url, clitest.ViewerToken, runLs, "--category", "transient")
	require.Equal(t, ExitOK, code, errOut)
	require.Equal(t, 3, strings.Count(out, "\n"), "header + 2: %s", out)
	require.Contains(t, out, "CATEGORY")
	require.Regexp(t, fmt.Sprintf(`(?m)^%d\s+orders\s+rejected\s+transient\s+pending`, ids[0]), out)
	code, out, _ = cli(t, url, clitest.ViewerToken, runLs, "--category", "unknown,permanent", "--queue", "billing")
	require.Equal(t, ExitOK, code)
	require.Equal(t, 3, strings.Count(out, "\n"), "header + 2: %s", out)
	code, _, errOut = cli(t, url, clitest.ViewerToken, runLs, "--category", "flaky")
	require.Equal(t, ExitUsage, code)
	require.Contains(t, errOut, `category "flaky"`)
	code, out, _ = cli(t, url, clitest.ViewerToken, runGroups, "--category", "unknown")
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "CATEGORY")
	require.Contains(t, out, "unknown")
	code, out, _ = cli(t, url, clitest.ViewerToken, runStats)
	require.Equal(t, ExitOK, code)
	require.Contains(t, out, "by category (pending / total):")
	require.Regexp(t, `unknown\s+6 / 6`, out, "the groups hold the category of their key, unknown for seeded rows")
}

// TestApprovalsShowReplay: a replay waiting for approval shows, in the
// list and on its own (dlq approvals ID), where it would publish, how
// fast, when it starts and what it does with an unknown outcome: what the
// approver decides on.
func TestApprovalsShowReplay(t *testing.T) {
	t.Parallel()
	url, _, _, _ := recoveryServer(t)
	body := `{"filter":{"source_queue":"orders"},"target":{"exchange":"","routing_key":"orders-retry"},` +
		`"rate_per_second":50,"delay_seconds":90,"on_unknown":"hold","confirm":true}`
	req, err := http.NewRequest("POST", url+"/api/v1/replays", strings.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+clitest.OperatorToken)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	answer, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.Equal(t, http.StatusAccepted, resp.StatusCode, string(answer))
	var a struct{ Approval store.Approval }
	require.NoError(t, json.Unmarshal(answer, &a), string(answer))
	require.NotZero(t, a.Approval.ID, string(answer))
	id := strconv.FormatInt(a.Approval.ID, 10)

	code, out, errOut := cli(t, url, clitest.AdminToken, runApprovals)
	require.Equal(t, ExitOK, code, errOut)
	require.Contains(t, out, `target: to the default exchange, routing key "orders-retry", rate: 50 messages/s, start: 1m30s after approval, on_unknown: hold`)

	code, out, errOut = cli(t, url, clitest.AdminToken, runApprovals, id)
	require.Equal(t, ExitOK, code, errOut)
	require.Regexp(t, `(?m)^id\s+`+id+`$`, out)
	require.Regexp(t, `(?m)^action\s+replay of 4 messages`, out)
	require.Regexp(t, `(?m)^target\s+to the default exchange, routing key "orders-retry"$`, out)
	require.Regexp(t, `(?m)^on_unknown\s+hold$`, out)
	require.Contains(t, out, `"source_queue": "orders"`, "the request in full")

	code, _, _ = cli(t, url, clitest.AdminToken, runApprovals, "999999")
	require.Equal(t, ExitNotFound, code)
	code, _, _ = cli(t, url, clitest.AdminToken, runApprovals, "x")
	require.Equal(t, ExitUsage, code)
}
